"""A small HTTP stand-in for the Kubernetes API server, for testing the Kubernetes actuator.

This is NOT a Kubernetes API server and does not try to be one: no API server can run in this
test environment. It serves the few endpoints the actuator uses (Deployments and their
``/scale`` subresource, Pods, coordination.k8s.io Leases) over real HTTP on 127.0.0.1, so the
official ``kubernetes`` client is exercised end to end (URL building, verbs, content types,
serialisation, error handling). What makes it more than a mock:

* every object it stores or returns, after a create, update or patch, is validated against the
  real Kubernetes OpenAPI schema of the newest release ``kubernetes-validate`` ships (strict:
  unknown fields are rejected) and a failure answers 422 like the API server would;
* patches must use a patch content type the API accepts, and are applied as JSON merge patches
  (RFC 7386) to the stored object before validation;
* updates use ``resourceVersion`` optimistic concurrency (409 Conflict on a stale version), and
  create answers 409 AlreadyExists, as the API server does;
* every request is recorded as an RBAC (group, resource, verb) triple so tests can compare what
  the actuator did with what the chart's Role grants.

Faults (status codes, ``Retry-After``, stalls longer than the client's timeout) are injected per
(verb, resource). A real-cluster check is still needed before a release; docs/kubernetes.md
describes it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

KUBE_VERSION = kubernetes_validate.latest_version()
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")

_ROUTES = [
    # (regex, group, resource, item?)
    (re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments$"), "apps", "deployments", False),
    (re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)$"), "apps", "deployments", True),
    (
        re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)/scale$"),
        "apps",
        "deployments/scale",
        True,
    ),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/pods$"), "", "pods", False),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$"), "", "pods", True),
    (
        re.compile(r"^/apis/coordination.k8s.io/v1/namespaces/([^/]+)/leases$"),
        "coordination.k8s.io",
        "leases",
        False,
    ),
    (
        re.compile(r"^/apis/coordination.k8s.io/v1/namespaces/([^/]+)/leases/([^/]+)$"),
        "coordination.k8s.io",
        "leases",
        True,
    ),
]


@dataclass
class Call:
    method: str
    path: str
    group: str
    resource: str
    verb: str
    status: int = 0
    content_type: str | None = None


@dataclass
class Fault:
    verb: str
    resource: str
    status: int = 500
    times: int = 1
    stall_s: float = 0.0
    retry_after: str | None = None


@functools.lru_cache(maxsize=32)
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """A strict validator for one kind, built once (the schema files are large)."""
    from kubernetes_validate.utils import schema_contents

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    base = f"kubernetes-json-schema/v{KUBE_VERSION}-local-strict"
    schema = schema_contents(f"{base}/{kind.lower()}-{group}.json", KUBE_VERSION)
    definitions = schema_contents(f"{base}/_definitions.json", KUBE_VERSION)
    registry: Registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_strict(obj: dict[str, Any]) -> None:
    """Validate against the Kubernetes schema, as ``kubernetes_validate.validate(strict=True)``."""
    try:
        _validator(obj["kind"], obj["apiVersion"]).validate(obj)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=KUBE_VERSION) from exc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if not sep or "!" in key:
            raise ValueError(f"unsupported label selector term {term!r}")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class KubeStandIn:
    """The stand-in's state and HTTP server. Use as a context manager."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.invalid: list[str] = []  # schema failures of bodies the client sent
        self._rv = 100
        self.server: ThreadingHTTPServer | None = None
        self._sockets: set[socket.socket] = set()
        self.thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> KubeStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with standin.lock:
                    standin._sockets.add(self.request)

            def finish(self) -> None:
                with standin.lock:
                    standin._sockets.discard(self.request)
                super().finish()

            def _serve(self) -> None:
                standin._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        with self.lock:  # drop kept-alive connections too: the API server is gone
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._sockets.clear()

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- state helpers for tests -----------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _validated(self, obj: dict[str, Any]) -> dict[str, Any]:
        validate_strict(obj)
        return obj

    def add_deployment(
        self, namespace: str, name: str, stage: str, replicas: int = 0, ready: int | None = None
    ) -> dict[str, Any]:
        labels = {
            "app.kubernetes.io/component": "worker",
            "distrs.io/stage": stage,
            "app.kubernetes.io/instance": "rel",
        }
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(labels),
                "resourceVersion": self._next_rv(),
                "uid": f"uid-{name}",
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {"containers": [{"name": "worker", "image": "ghcr.io/distrs/distrs:0.1.0"}]},
                },
            },
            "status": {"replicas": replicas, "readyReplicas": replicas if ready is None else ready},
        }
        with self.lock:
            self.deployments[(namespace, name)] = self._validated(obj)
        return obj

    def add_pod(self, namespace: str, name: str, stage: str, ready: bool = True) -> dict[str, Any]:
        labels = {
            "app.kubernetes.io/component": "worker",
            "distrs.io/stage": stage,
            "app.kubernetes.io/instance": "rel",
        }
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "resourceVersion": self._next_rv(),
            },
            "spec": {"containers": [{"name": "worker", "image": "ghcr.io/distrs/distrs:0.1.0"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        with self.lock:
            self.pods[(namespace, name)] = self._validated(obj)
        return obj

    def replicas(self, namespace: str, name: str) -> int:
        with self.lock:
            return int(self.deployments[(namespace, name)]["spec"]["replicas"])

    def set_ready(self, namespace: str, name: str, ready: int) -> None:
        with self.lock:
            self.deployments[(namespace, name)]["status"]["readyReplicas"] = ready

    def pod_cost(self, namespace: str, name: str) -> str | None:
        with self.lock:
            annotations = self.pods[(namespace, name)]["metadata"].get("annotations") or {}
            return annotations.get("controller.kubernetes.io/pod-deletion-cost")

    def fail(
        self, verb: str, resource: str, status: int, times: int = 1, retry_after: str | None = None
    ) -> None:
        with self.lock:
            self.faults.append(Fault(verb, resource, status=status, times=times, retry_after=retry_after))

    def stall(self, verb: str, resource: str, seconds: float, times: int = 1) -> None:
        with self.lock:
            self.faults.append(Fault(verb, resource, status=0, times=times, stall_s=seconds))

    def permissions_seen(self) -> set[tuple[str, str, str]]:
        with self.lock:
            return {(c.group, c.resource, c.verb) for c in self.calls}

    def calls_of(self, verb: str, resource: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.verb == verb and c.resource == resource]

    # -- HTTP ------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlparse(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        route = None
        for rx, group, resource, item in _ROUTES:
            m = rx.match(url.path)
            if m:
                route = (group, resource, item, m.groups())
                break
        if route is None:
            call = Call(h.command, url.path, "?", "?", "?")
            with self.lock:
                self.calls.append(call)
            self._reply(h, call, 404, status_body(404, "NotFound", f"the stand-in does not serve {url.path}"))
            return
        group, resource, item, parts = route
        verb = {
            "GET": "get" if item else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }[h.command]
        if query.get("watch") in ("true", "1"):
            verb = "watch"
        call = Call(h.command, url.path, group, resource, verb, content_type=h.headers.get("Content-Type"))
        with self.lock:
            self.calls.append(call)
            fault = next(
                (f for f in self.faults if f.verb == verb and f.resource == resource and f.times > 0), None
            )
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            if fault.stall_s:
                time.sleep(fault.stall_s)
            else:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                reason = REASONS.get(fault.status, "Unknown")
                failure = status_body(fault.status, reason, f"injected {fault.status} for {verb} {resource}")
                self._reply(h, call, fault.status, failure, headers)
                return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._reply(h, call, 400, status_body(400, "BadRequest", "request body is not JSON"))
            return
        try:
            code, out = self._dispatch(verb, resource, parts, query, body, call)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            message = f"schema: {where}: {exc.message}"
            with self.lock:
                self.invalid.append(f"{verb} {resource}: {message}")
            code, out = 422, status_body(422, "Invalid", message)
        except ValueError as exc:
            code, out = 400, status_body(400, "BadRequest", str(exc))
        self._reply(h, call, code, out)

    def _reply(
        self,
        h: BaseHTTPRequestHandler,
        call: Call,
        code: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        call.status = code
        data = json.dumps(body).encode()
        try:
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test)

    def _not_found(self, kind: str, name: str) -> tuple[int, dict[str, Any]]:
        return 404, status_body(404, "NotFound", f'{kind} "{name}" not found')

    def _dispatch(
        self,
        verb: str,
        resource: str,
        parts: tuple[str, ...],
        query: dict[str, str],
        body: Any,
        call: Call,
    ) -> tuple[int, dict[str, Any]]:
        ns = parts[0]
        name = parts[1] if len(parts) > 1 else None
        if verb == "patch" and (call.content_type or "").split(";")[0] not in PATCH_TYPES:
            return 415, status_body(415, "UnsupportedMediaType", f"patch content type {call.content_type!r}")
        with self.lock:
            if resource == "deployments" and verb == "list":
                items = [
                    copy.deepcopy(d)
                    for (n, _), d in sorted(self.deployments.items())
                    if n == ns and matches(d["metadata"].get("labels", {}), query.get("labelSelector"))
                ]
                return 200, {
                    "kind": "DeploymentList",
                    "apiVersion": "apps/v1",
                    "metadata": {},
                    "items": items,
                }
            if resource == "deployments" and verb == "get":
                d = self.deployments.get((ns, name or ""))
                return (200, copy.deepcopy(d)) if d else self._not_found("deployments.apps", name or "")
            if resource == "deployments/scale":
                d = self.deployments.get((ns, name or ""))
                if d is None:
                    return self._not_found("deployments.apps", name or "")
                scale = self._scale(d)
                if verb == "get":
                    return 200, scale
                if verb == "patch":
                    patched = self._validated(merge_patch(scale, body))
                    if patched["metadata"]["name"] != name:
                        raise ValueError("metadata.name may not change")
                    d["spec"]["replicas"] = int(patched["spec"].get("replicas", 0))
                    d["metadata"]["resourceVersion"] = self._next_rv()
                    return 200, self._scale(d)
            if resource == "pods" and verb == "list":
                items = [
                    copy.deepcopy(p)
                    for (n, _), p in sorted(self.pods.items())
                    if n == ns and matches(p["metadata"].get("labels", {}), query.get("labelSelector"))
                ]
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
            if resource == "pods" and verb == "patch":
                p = self.pods.get((ns, name or ""))
                if p is None:
                    return self._not_found("pods", name or "")
                patched = self._validated(merge_patch(p, body))
                patched["metadata"]["resourceVersion"] = self._next_rv()
                self.pods[(ns, name or "")] = patched
                return 200, copy.deepcopy(patched)
            if resource == "leases":
                return self._lease(verb, ns, name, body)
        return 405, status_body(405, "MethodNotAllowed", f"the stand-in does not serve {verb} {resource}")

    def _scale(self, d: dict[str, Any]) -> dict[str, Any]:
        labels = d["spec"]["selector"]["matchLabels"]
        return self._validated(
            {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {
                    "name": d["metadata"]["name"],
                    "namespace": d["metadata"]["namespace"],
                    "resourceVersion": d["metadata"]["resourceVersion"],
                },
                "spec": {"replicas": d["spec"]["replicas"]},
                "status": {
                    "replicas": d["status"].get("replicas", 0),
                    "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
                },
            }
        )

    def _lease(self, verb: str, ns: str, name: str | None, body: Any) -> tuple[int, dict[str, Any]]:
        if verb == "get":
            lease = self.leases.get((ns, name or ""))
            return (
                (200, copy.deepcopy(lease))
                if lease
                else self._not_found("leases.coordination.k8s.io", name or "")
            )
        if not isinstance(body, dict):
            raise ValueError("Lease body must be an object")
        self._validated(body)
        if body.get("kind") != "Lease" or body.get("apiVersion") != "coordination.k8s.io/v1":
            raise ValueError("body is not a coordination.k8s.io/v1 Lease")
        meta = body.get("metadata") or {}
        if verb == "create":
            key = (ns, meta.get("name", ""))
            if key in self.leases:
                return 409, status_body(409, "AlreadyExists", f'leases "{key[1]}" already exists')
            if meta.get("resourceVersion"):
                raise ValueError("resourceVersion should not be set on objects to be created")
            stored = copy.deepcopy(body)
            stored["metadata"]["namespace"] = ns
            stored["metadata"]["resourceVersion"] = self._next_rv()
            self.leases[key] = stored
            return 201, copy.deepcopy(stored)
        if verb == "update":
            key = (ns, name or "")
            if meta.get("name") != name:
                raise ValueError("the name of the object does not match the name in the URL")
            current = self.leases.get(key)
            if current is None:
                return self._not_found("leases.coordination.k8s.io", name or "")
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, status_body(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version",
                )
            stored = copy.deepcopy(body)
            stored["metadata"]["namespace"] = ns
            stored["metadata"]["resourceVersion"] = self._next_rv()
            self.leases[key] = stored
            return 200, copy.deepcopy(stored)
        return 405, status_body(405, "MethodNotAllowed", f"the stand-in does not serve {verb} leases")
