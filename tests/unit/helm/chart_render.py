"""Render the chart with the real Helm engine (helm-python-sdk) and validate what comes out.

Shared by the chart tests: ``render(values)`` returns the parsed objects of one release;
``validate(obj)`` checks an object against the Kubernetes OpenAPI schema (kubernetes-validate,
strict: unknown fields are errors) for the newest Kubernetes release the package knows.
prometheus-operator's ServiceMonitor and PodMonitor are CRDs kubernetes-validate has no schema for;
they are checked against the subset of the CRDs' schemas the chart uses (``SERVICE_MONITOR_SCHEMA``,
``POD_MONITOR_SCHEMA``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "distrs"
RELEASE = "rel"
NAMESPACE = "rewards"
KUBE_VERSION = kubernetes_validate.latest_version()

# From monitoring.coreos.com/v1 ServiceMonitor (prometheus-operator CRD), the fields we use.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    "additionalProperties": False,
                },
                "selector": {
                    "type": "object",
                    "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                    },
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "scrapeTimeout": {
                                "type": "string",
                                "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
                            },
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": {
                                        "type": "object",
                                        "required": ["key"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "key": {"type": "string"},
                                            "name": {"type": "string"},
                                            "optional": {"type": "boolean"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


# From monitoring.coreos.com/v1 PodMonitor, the fields we use (the GPU workers' /metrics).
POD_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "additionalProperties": False,
            "properties": {
                "namespaceSelector": SERVICE_MONITOR_SCHEMA["properties"]["spec"]["properties"][
                    "namespaceSelector"
                ],
                "selector": SERVICE_MONITOR_SCHEMA["properties"]["spec"]["properties"]["selector"],
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            k: v
                            for k, v in SERVICE_MONITOR_SCHEMA["properties"]["spec"]["properties"][
                                "endpoints"
                            ]["items"]["properties"].items()
                            if k in ("port", "path", "interval", "scrapeTimeout")
                        },
                    },
                },
            },
        },
    },
}


def render(values: dict[str, Any] | None = None, *, chart: Any = None) -> list[dict[str, Any]]:
    """Objects of one rendered release (NOTES.txt and empty templates left out)."""
    import helm_python as helm

    def _go(c: Any) -> list[dict[str, Any]]:
        out = c.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
        objs: list[dict[str, Any]] = []
        for path, text in sorted(out.items()):
            if path.endswith("NOTES.txt"):
                continue
            objs.extend(doc for doc in yaml.safe_load_all(text) if doc)
        return objs

    if chart is not None:
        return _go(chart)
    with helm.Chart.load(CHART) as c:
        return _go(c)


def validate(obj: dict[str, Any]) -> None:
    if obj.get("kind") == "ServiceMonitor":
        jsonschema.validate(obj, SERVICE_MONITOR_SCHEMA)
        return
    if obj.get("kind") == "PodMonitor":
        jsonschema.validate(obj, POD_MONITOR_SCHEMA)
        return
    kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif o["kind"] == "Pod":
            out.append((f"Pod/{o['metadata']['name']}", o["spec"]))
    return out
