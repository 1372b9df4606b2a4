"""The Kubernetes actuator: worker replicas per stage through the Deployment ``/scale`` subresource.

One Deployment per stage (named ``deployment_prefix + stage``, as the Helm chart creates them).
The actuator

* patches ``deployments/scale`` (never the whole Deployment, so it cannot fight ``helm upgrade``
  over the pod template),
* reads desired and ready replicas from the Deployments' status,
* before a scale-down, annotates the stage's pods with ``controller.kubernetes.io/pod-deletion-cost``
  (idle pods low, busy pods high) so the ReplicaSet removes idle workers first; the worker's
  graceful drain and ``terminationGracePeriodSeconds`` >= the stage timeout cover the rest,
* with several planner replicas, acts only while it holds a ``coordination.k8s.io`` Lease
  (:mod:`distrs.actuators.leader`).

The official client is synchronous, so every call runs in a thread (``asyncio.to_thread``).
Transient failures (409, 429, 5xx, timeouts, refused connections) are retried with capped
exponential backoff; permanent ones (403, 404, 400/422) are reported at once with a message that
says what to fix. Nothing here raises into the planner: failures land in
``StageReplicas.error`` and the ``distrs_actuator_errors_total`` counter.

``PERMISSIONS`` lists every API call this module makes; the chart's Role grants exactly these and
a test checks both that the Role matches and that the module, driven through all its paths,
makes no other call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distrs.actuators.base import StageReplicas
from distrs.actuators.leader import LeaseElector

if TYPE_CHECKING:
    from distrs.config import PlannerSettings
    from distrs.metrics import Metrics

log = logging.getLogger(__name__)

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
IDLE_POD_COST = -100
BUSY_POD_COST = 100
WORKER_SELECTOR = "app.kubernetes.io/component=worker"


@dataclass(frozen=True)
class Permission:
    """One RBAC grant: API group, resource (``name/subresource``) and verb."""

    group: str
    resource: str
    verb: str


# Every call this module makes, as RBAC sees it. Kept next to the calls (see KubeApi) and
# compared with the chart's Role by tests/unit/helm and tests/integration/k8s.
PERMISSIONS: frozenset[Permission] = frozenset(
    {
        Permission("apps", "deployments", "list"),
        Permission("apps", "deployments/scale", "get"),
        Permission("apps", "deployments/scale", "patch"),
        Permission("", "pods", "list"),
        Permission("", "pods", "patch"),
        Permission("coordination.k8s.io", "leases", "get"),
        Permission("coordination.k8s.io", "leases", "create"),
        Permission("coordination.k8s.io", "leases", "update"),
    }
)


class KubeError(Exception):
    """A failed API call, classified. ``retryable`` says whether trying again may help."""

    def __init__(self, reason: str, message: str, *, status: int = 0, retryable: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.retryable = retryable
        self.retry_after_s: float | None = None


def _status_message(status: int, what: str, namespace: str, body: str | None) -> tuple[str, str, bool]:
    detail = ""
    if body:
        try:
            detail = str(json.loads(body).get("message") or "")
        except (ValueError, AttributeError):
            detail = body[:200]
    suffix = f": {detail}" if detail else ""
    if status == 403:
        return (
            "forbidden",
            f"403 Forbidden: the planner's ServiceAccount may not {what} in namespace {namespace!r}; "
            f"check the chart's planner Role (rbac.create){suffix}",
            False,
        )
    if status == 401:
        return "unauthorized", f"401 Unauthorized: credentials rejected while trying to {what}{suffix}", False
    if status == 404:
        return (
            "not_found",
            f"404 Not Found: cannot {what} in namespace {namespace!r}; is the worker Deployment "
            f"installed and DISTRS_DEPLOYMENT_PREFIX right?{suffix}",
            False,
        )
    if status == 409:
        return "conflict", f"409 Conflict while trying to {what}{suffix}", True
    if status == 429:
        return "throttled", f"429 Too Many Requests while trying to {what}{suffix}", True
    if status >= 500:
        return "server_error", f"{status} from the API server while trying to {what}{suffix}", True
    return "invalid", f"{status} rejected request to {what}{suffix}", False


def classify(exc: BaseException, what: str, namespace: str) -> KubeError:
    """Turn a client exception into a :class:`KubeError`."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as Urllib3Error

    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 0:
            return KubeError(
                "unreachable", f"cannot reach the API server to {what}: {exc.reason}", retryable=True
            )
        reason, message, retryable = _status_message(status, what, namespace, exc.body)
        err = KubeError(reason, message, status=status, retryable=retryable)
        headers = exc.headers or {}
        retry_after = headers.get("Retry-After") if hasattr(headers, "get") else None
        if retry_after:
            with contextlib.suppress(ValueError):
                err.retry_after_s = float(retry_after)
        return err
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        return KubeError("timeout", f"timed out trying to {what}: {exc}", retryable=True)
    if isinstance(exc, Urllib3Error | OSError):
        return KubeError("unreachable", f"cannot reach the API server to {what}: {exc}", retryable=True)
    return KubeError("internal", f"unexpected {type(exc).__name__} trying to {what}: {exc}")


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter for retryable errors."""

    attempts: int = 4
    base_s: float = 0.2
    cap_s: float = 5.0

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.cap_s)
        return random.uniform(0, min(self.cap_s, self.base_s * 2**attempt))


class KubeApi:
    """The handful of calls the actuator makes, over the official client (synchronous).

    Responses are read as plain JSON (``_preload_content=False``): the actuator needs a few
    fields, not the generated models. Each method names the :data:`PERMISSIONS` entry it uses.
    """

    PATCH = "application/merge-patch+json"

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.timeout = (min(timeout_s, 5.0), timeout_s)

    @staticmethod
    def _json(resp: Any) -> dict[str, Any]:
        data = resp.data
        out: dict[str, Any] = json.loads(data) if data else {}
        return out

    def list_deployments(self, namespace: str, selector: str) -> dict[str, Any]:  # deployments list
        return self._json(
            self.apps.list_namespaced_deployment(
                namespace, label_selector=selector, _preload_content=False, _request_timeout=self.timeout
            )
        )

    def read_scale(self, namespace: str, name: str) -> dict[str, Any]:  # deployments/scale get
        return self._json(
            self.apps.read_namespaced_deployment_scale(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            )
        )

    def patch_scale(self, namespace: str, name: str, replicas: int) -> dict[str, Any]:  # scale patch
        return self._json(
            self.apps.patch_namespaced_deployment_scale(
                name,
                namespace,
                {"spec": {"replicas": replicas}},
                _content_type=self.PATCH,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def list_pods(self, namespace: str, selector: str) -> dict[str, Any]:  # pods list
        return self._json(
            self.core.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False, _request_timeout=self.timeout
            )
        )

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
        # pods patch
        return self._json(
            self.core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": annotations}},
                _content_type=self.PATCH,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def read_lease(self, namespace: str, name: str) -> dict[str, Any]:  # leases get
        return self._json(
            self.coordination.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            )
        )

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:  # leases create
        return self._json(
            self.coordination.create_namespaced_lease(
                namespace,
                body,  # type: ignore[arg-type]  # plain JSON body; the client serialises dicts as-is
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        # leases update
        return self._json(
            self.coordination.replace_namespaced_lease(
                name,
                namespace,
                body,  # type: ignore[arg-type]
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        )

    def close(self) -> None:
        self.api_client.close()


def make_api_client(
    *, host: str | None = None, kubeconfig: str | None = None, context: str | None = None
) -> Any:
    """An ``ApiClient``: explicit ``host`` (tests), in-cluster service account, or kubeconfig.

    urllib3's own retries are switched off so :class:`RetryPolicy` is the only retry layer.
    """
    from kubernetes import client, config

    cfg = client.Configuration()
    if host is not None:
        cfg.host = host
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    cfg.retries = False
    return client.ApiClient(cfg)


@dataclass
class PodView:
    name: str
    ready: bool
    cost: int | None


def pods_from_list(obj: dict[str, Any]) -> list[PodView]:
    out = []
    for item in obj.get("items") or []:
        meta = item.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue  # already terminating
        conditions = (item.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        raw = (meta.get("annotations") or {}).get(DELETION_COST)
        try:
            cost = int(raw) if raw is not None else None
        except ValueError:
            cost = None
        out.append(PodView(name=meta.get("name", ""), ready=ready, cost=cost))
    return out


def is_busy(pod_name: str, busy: set[str]) -> bool:
    """Worker ids are the pod name (the chart sets it) or ``hostname-pid`` (the default)."""
    return pod_name in busy or any(w.startswith(pod_name + "-") for w in busy)


def deletion_cost_changes(pods: list[PodView], busy: set[str]) -> dict[str, int]:
    """Pod name -> the deletion cost it should carry, for pods whose annotation differs.

    Idle pods get a low cost, busy ones a high cost, so the ReplicaSet controller (which removes
    lower-cost pods first among equally ready ones) scales down idle workers first.
    """
    changes = {}
    for pod in pods:
        want = BUSY_POD_COST if is_busy(pod.name, busy) else IDLE_POD_COST
        if pod.cost != want:
            changes[pod.name] = want
    return changes


def selector_string(match_labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


BusyWorkers = Callable[[str], Awaitable[set[str]]]


class _Leases:
    """:class:`distrs.actuators.leader.LeaseClient` over :class:`KubeApi` and the retry loop."""

    def __init__(self, actuator: KubernetesActuator, name: str) -> None:
        self.actuator = actuator
        self.name = name

    async def read(self) -> dict[str, Any] | None:
        try:
            return await self.actuator._call(
                "get the leader Lease", "", self.actuator.api.read_lease, self.name
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return await self.actuator._call(
                "create the leader Lease", "", self.actuator.api.create_lease, body, retry_conflict=False
            )
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise

    async def replace(self, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return await self.actuator._call(
                "update the leader Lease",
                "",
                self.actuator.api.replace_lease,
                self.name,
                body,
                retry_conflict=False,
            )
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise


class KubernetesActuator:
    """:class:`distrs.actuators.base.Actuator` over worker Deployments in one namespace."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        deployment_prefix: str,
        stages: list[str] | None = None,
        selector: str = WORKER_SELECTOR,
        busy_workers: BusyWorkers | None = None,
        metrics: Metrics | None = None,
        retry: RetryPolicy | None = None,
        leader_lease: str | None = None,
        identity: str | None = None,
        lease_duration_s: int = 15,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        elector_clock: Any = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.prefix = deployment_prefix
        self.stages = list(stages) if stages is not None else None
        self.selector = selector
        self.busy_workers = busy_workers
        self.metrics = metrics
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self._view: dict[str, StageReplicas] = {}
        self._pod_selectors: dict[str, str] = {}
        self._missing: set[str] = set()
        self.elector: LeaseElector | None = None
        if leader_lease:
            kwargs: dict[str, Any] = {"clock": elector_clock} if elector_clock is not None else {}
            self.elector = LeaseElector(
                _Leases(self, leader_lease),
                namespace=namespace,
                name=leader_lease,
                identity=identity or socket.gethostname(),
                duration_s=lease_duration_s,
                **kwargs,
            )

    # -- plumbing ---------------------------------------------------------------------------

    async def _call(
        self, what: str, stage: str, fn: Callable[..., Any], *args: Any, retry_conflict: bool = True
    ) -> Any:
        """Run one client call in a thread, retrying what may succeed on a later try."""
        for attempt in range(self.retry.attempts):
            try:
                return await asyncio.to_thread(fn, self.namespace, *args)
            except Exception as exc:
                err = classify(exc, what, self.namespace)
                last = attempt + 1 >= self.retry.attempts
                if not err.retryable or (err.status == 409 and not retry_conflict) or last:
                    raise err from exc
                delay = self.retry.delay(attempt, err.retry_after_s)
                log.info("kubernetes: %s (%s); retry %d in %.2fs", what, err.reason, attempt + 1, delay)
                await self.sleep(delay)
        raise AssertionError("unreachable")

    def _record(self, stage: str, err: KubeError) -> None:
        view = self._view.setdefault(stage, StageReplicas()) if stage else None
        if view is None or view.error != str(err):  # log a repeated failure once
            log.warning("kubernetes actuator, stage %s: %s", stage or "-", err)
        if view is not None:
            view.error = str(err)
        if self.metrics is not None:
            self.metrics.actuator_errors.labels(stage=stage or "all", reason=err.reason).inc()

    def deployment(self, stage: str) -> str:
        return f"{self.prefix}{stage}"

    def _missing_message(self, stage: str) -> str:
        return (
            f"Deployment {self.deployment(stage)!r} not found in namespace {self.namespace!r} "
            f"(selector {self.selector!r}); is the stage enabled in the chart (workers.stages.{stage})?"
        )

    async def is_leader(self) -> bool:
        """True when this planner may scale (always, without leader election)."""
        if self.elector is None:
            return True
        return await self.elector.ensure()

    # -- Actuator protocol ------------------------------------------------------------------

    async def set_replicas(self, stage: str, n: int) -> None:
        n = max(0, int(n))
        if stage in self._missing:
            # Its Deployment was absent at the last observe (stage disabled in the chart): the
            # Role does not name it, so asking would only earn a misleading 403.
            if n > 0:
                self._record(stage, KubeError("not_found", self._missing_message(stage), status=404))
            return
        if not await self.is_leader():
            return
        name = self.deployment(stage)
        try:
            scale = await self._call(f"get deployments/scale {name}", stage, self.api.read_scale, name)
            current = int((scale.get("spec") or {}).get("replicas") or 0)
            if n < current:
                try:
                    await self._prefer_idle_pods(stage)
                except KubeError as err:  # still scale down: the workers' graceful drain protects work
                    self._record(stage, err)
            if n != current:
                await self._call(f"patch deployments/scale {name}", stage, self.api.patch_scale, name, n)
                log.info("kubernetes: %s %d -> %d replicas", name, current, n)
        except KubeError as err:
            self._record(stage, err)
            return
        view = self._view.setdefault(stage, StageReplicas())
        view.desired = n
        view.error = None

    async def _prefer_idle_pods(self, stage: str) -> None:
        """Mark idle pods cheap to delete and busy ones dear, before a scale-down."""
        if self.busy_workers is None:
            return
        try:
            busy = await self.busy_workers(stage)
        except Exception as exc:  # the planner's view of leases is best effort here
            log.warning("kubernetes: cannot tell busy workers of %s: %s", stage, exc)
            return
        selector = self._pod_selectors.get(stage) or f"{self.selector},distrs.io/stage={stage}"
        pods = pods_from_list(await self._call(f"list pods of {stage}", stage, self.api.list_pods, selector))
        for pod_name, cost in deletion_cost_changes(pods, busy).items():
            try:
                await self._call(
                    f"patch pod {pod_name}",
                    stage,
                    self.api.annotate_pod,
                    pod_name,
                    {DELETION_COST: str(cost)},
                )
            except KubeError as err:
                if err.status != 404:  # a pod that just went away needs no mark
                    raise
        view = self._view.setdefault(stage, StageReplicas())
        view.busy = {p.name for p in pods if is_busy(p.name, busy)}

    async def observe(self) -> dict[str, StageReplicas]:
        try:
            listing = await self._call("list deployments", "", self.api.list_deployments, self.selector)
        except KubeError as err:
            self._record("", err)
            for view in self._view.values():
                view.error = str(err)
            return {k: StageReplicas(v.desired, v.ready, set(v.busy), v.error) for k, v in self._view.items()}
        found: dict[str, dict[str, Any]] = {}
        for item in listing.get("items") or []:
            name = (item.get("metadata") or {}).get("name", "")
            if name.startswith(self.prefix):
                found[name[len(self.prefix) :]] = item
        stages = self.stages if self.stages is not None else sorted(found)
        for stage in stages:
            view = self._view.setdefault(stage, StageReplicas())
            item = found.get(stage)
            if item is None:
                self._missing.add(stage)
                view.desired = view.ready = 0
                view.error = self._missing_message(stage)
                continue
            self._missing.discard(stage)
            spec, status = item.get("spec") or {}, item.get("status") or {}
            view.desired = int(spec.get("replicas") or 0)
            view.ready = int(status.get("readyReplicas") or 0)
            view.error = None
            labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
            if labels:
                self._pod_selectors[stage] = selector_string(labels)
        return {k: StageReplicas(v.desired, v.ready, set(v.busy), v.error) for k, v in self._view.items()}

    async def close(self) -> None:
        if self.elector is not None:
            await self.elector.release()
        await asyncio.to_thread(self.api.close)


def create_kubernetes_actuator(
    settings: PlannerSettings,
    stages: list[str] | None = None,
    *,
    busy_workers: BusyWorkers | None = None,
    metrics: Metrics | None = None,
    host: str | None = None,
) -> KubernetesActuator:
    """Build the actuator from planner settings (in-cluster auth, else kubeconfig).

    Leader election is on when a Lease is named (``DISTRS_LEADER_LEASE``; the chart sets it when
    ``planner.replicas`` > 1). ``busy_workers(stage)`` returns the worker ids holding a lease, so
    idle pods are scaled down first.
    """
    api = KubeApi(
        make_api_client(host=host, kubeconfig=settings.kubeconfig), timeout_s=settings.api_timeout_s
    )
    return KubernetesActuator(
        api,
        namespace=settings.namespace,
        deployment_prefix=settings.deployment_prefix,
        stages=stages,
        busy_workers=busy_workers,
        metrics=metrics,
        leader_lease=settings.leader_lease,
        identity=settings.leader_identity,
        lease_duration_s=settings.leader_lease_duration_s,
    )
