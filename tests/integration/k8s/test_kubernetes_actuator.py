"""The Kubernetes actuator, through the official client, against the API stand-in over HTTP.

The stand-in (kube_standin.py) is not an API server; it validates every object the actuator
writes against the real Kubernetes schema and answers like the API server for the calls used.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from distrs.actuators.kubernetes import (
    BUSY_POD_COST,
    IDLE_POD_COST,
    PERMISSIONS,
    KubeApi,
    KubernetesActuator,
    RetryPolicy,
    make_api_client,
)
from distrs.metrics import Metrics
from tests.integration.k8s.kube_standin import KubeStandIn

NS = "rewards"
PREFIX = "rel-distrs-worker-"
FAST = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.05)


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as s:
        s.add_deployment(NS, PREFIX + "compile", "compile", replicas=2, ready=1)
        s.add_deployment(NS, PREFIX + "execute", "execute", replicas=0)
        for i in range(3):
            s.add_pod(NS, f"{PREFIX}compile-abc-{i}", "compile")
        yield s
        assert s.invalid == [], "the actuator sent objects the Kubernetes schema rejects"


def make(standin: KubeStandIn, **kw: Any) -> KubernetesActuator:
    api = KubeApi(make_api_client(host=standin.url), timeout_s=kw.pop("timeout_s", 2.0))
    kw.setdefault("retry", FAST)
    kw.setdefault("stages", ["compile", "execute"])
    return KubernetesActuator(api, namespace=NS, deployment_prefix=PREFIX, **kw)


def busy(*names: str) -> Any:
    async def _busy(stage: str) -> set[str]:
        return set(names)

    return _busy


async def test_observe_reads_desired_and_ready(standin: KubeStandIn) -> None:
    act = make(standin, stages=["compile", "execute", "verify"])
    view = await act.observe()
    assert (view["compile"].desired, view["compile"].ready, view["compile"].error) == (2, 1, None)
    assert (view["execute"].desired, view["execute"].ready) == (0, 0)
    assert view["verify"].error is not None and f"{PREFIX}verify" in view["verify"].error
    await act.close()


async def test_scale_up_patches_scale_subresource(standin: KubeStandIn) -> None:
    act = make(standin)
    await act.set_replicas("execute", 3)
    assert standin.replicas(NS, PREFIX + "execute") == 3
    patch = standin.calls_of("patch", "deployments/scale")
    assert len(patch) == 1 and patch[0].content_type == "application/merge-patch+json"
    assert standin.calls_of("patch", "pods") == [] and standin.calls_of("list", "pods") == []
    standin.set_ready(NS, PREFIX + "execute", 3)
    assert (await act.observe())["execute"].ready == 3
    await act.set_replicas("execute", 3)  # no change -> no patch
    assert len(standin.calls_of("patch", "deployments/scale")) == 1
    await act.close()


async def test_scale_down_marks_idle_pods_cheap_first(standin: KubeStandIn) -> None:
    standin.add_deployment(NS, PREFIX + "compile", "compile", replicas=3)
    act = make(standin, busy_workers=busy(f"{PREFIX}compile-abc-1-4242"))
    await act.observe()
    await act.set_replicas("compile", 1)
    assert standin.pod_cost(NS, f"{PREFIX}compile-abc-0") == str(IDLE_POD_COST)
    assert standin.pod_cost(NS, f"{PREFIX}compile-abc-1") == str(BUSY_POD_COST)
    assert standin.pod_cost(NS, f"{PREFIX}compile-abc-2") == str(IDLE_POD_COST)
    assert standin.replicas(NS, PREFIX + "compile") == 1
    order = [c.verb + " " + c.resource for c in standin.calls if c.verb == "patch"]
    assert order == ["patch pods"] * 3 + ["patch deployments/scale"], (
        "costs must be set before the scale-down"
    )
    view = await act.observe()
    assert view["compile"].busy == {f"{PREFIX}compile-abc-1"}
    # A second scale-down with the same busy set re-marks nothing.
    await act.set_replicas("compile", 0)
    assert len(standin.calls_of("patch", "pods")) == 3
    await act.close()


async def test_conflict_throttle_and_server_errors_are_retried(standin: KubeStandIn) -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    act = make(standin, metrics=metrics)
    standin.fail("patch", "deployments/scale", 409)
    standin.fail("get", "deployments/scale", 429, retry_after="0")
    standin.fail("list", "deployments", 503, times=2)
    await act.set_replicas("execute", 2)
    assert standin.replicas(NS, PREFIX + "execute") == 2
    assert [c.status for c in standin.calls_of("patch", "deployments/scale")] == [409, 200]
    view = await act.observe()
    assert view["execute"].desired == 2 and view["execute"].error is None
    assert [c.status for c in standin.calls_of("list", "deployments")] == [503, 503, 200]
    assert (
        registry.get_sample_value("distrs_actuator_errors_total", {"stage": "execute", "reason": "conflict"})
        is None
    )
    await act.close()


async def test_persistent_server_error_is_reported_not_raised(standin: KubeStandIn) -> None:
    registry = CollectorRegistry()
    act = make(standin, metrics=Metrics(registry))
    standin.fail("patch", "deployments/scale", 500, times=10)
    await act.set_replicas("execute", 4)  # must not raise
    assert standin.replicas(NS, PREFIX + "execute") == 0
    assert len(standin.calls_of("patch", "deployments/scale")) == FAST.attempts
    view = await act.observe()
    assert view["execute"].error is None  # observe succeeded afterwards
    standin.fail("patch", "deployments/scale", 500, times=10)
    await act.set_replicas("execute", 4)
    assert "500" in (act._view["execute"].error or "")
    sample = registry.get_sample_value(
        "distrs_actuator_errors_total", {"stage": "execute", "reason": "server_error"}
    )
    assert sample == 2
    await act.close()


async def test_forbidden_is_not_retried_and_names_the_role(standin: KubeStandIn) -> None:
    registry = CollectorRegistry()
    act = make(standin, metrics=Metrics(registry))
    standin.fail("get", "deployments/scale", 403)
    await act.set_replicas("compile", 5)
    assert len(standin.calls_of("get", "deployments/scale")) == 1
    error = act._view["compile"].error or ""
    assert "403 Forbidden" in error and "Role" in error and NS in error
    assert (
        registry.get_sample_value("distrs_actuator_errors_total", {"stage": "compile", "reason": "forbidden"})
        == 1
    )
    assert standin.replicas(NS, PREFIX + "compile") == 2
    await act.close()


async def test_missing_deployment_is_a_clear_404(standin: KubeStandIn) -> None:
    registry = CollectorRegistry()
    act = make(standin, stages=["compile", "verify"], metrics=Metrics(registry))
    await act.set_replicas("verify", 1)  # not observed yet: the API answers 404
    assert len(standin.calls_of("get", "deployments/scale")) == 1
    assert "404 Not Found" in (act._view["verify"].error or "")
    error = (await act.observe())["verify"].error or ""
    assert f"{PREFIX}verify" in error and "workers.stages.verify" in error
    # Known missing: no more API calls (the Role would answer a misleading 403), 0 is no error.
    await act.set_replicas("verify", 0)
    await act.set_replicas("verify", 2)
    assert len(standin.calls_of("get", "deployments/scale")) == 1
    assert (
        registry.get_sample_value("distrs_actuator_errors_total", {"stage": "verify", "reason": "not_found"})
        == 2
    )
    standin.add_deployment(NS, PREFIX + "verify", "verify")  # enabled later: picked up on observe
    assert (await act.observe())["verify"].error is None
    await act.set_replicas("verify", 2)
    assert standin.replicas(NS, PREFIX + "verify") == 2
    await act.close()


async def test_timeouts_are_retried_then_surfaced(standin: KubeStandIn) -> None:
    act = make(standin, timeout_s=0.3)
    standin.stall("get", "deployments/scale", 0.8)
    await act.set_replicas("execute", 1)
    assert standin.replicas(NS, PREFIX + "execute") == 1
    standin.stall("get", "deployments/scale", 0.8, times=FAST.attempts)
    await act.set_replicas("execute", 2)
    assert standin.replicas(NS, PREFIX + "execute") == 1
    assert "timed out" in (act._view["execute"].error or "")
    await act.close()


async def test_unreachable_api_server_never_raises() -> None:
    standin = KubeStandIn().start()
    standin.add_deployment(NS, PREFIX + "compile", "compile", replicas=1)
    act = make(standin, timeout_s=0.5)
    assert (await act.observe())["compile"].desired == 1
    standin.stop()
    view = await act.observe()
    assert view["compile"].desired == 1 and view["compile"].error
    await act.set_replicas("compile", 3)
    assert "reach" in (act._view["compile"].error or "") or "timed out" in (act._view["compile"].error or "")
    await act.close()


async def test_leader_failover(standin: KubeStandIn) -> None:
    clock = Clock()
    a = make(standin, leader_lease="planner-leader", identity="planner-a", elector_clock=clock)
    b = make(standin, leader_lease="planner-leader", identity="planner-b", elector_clock=clock)
    await a.set_replicas("execute", 2)
    await b.set_replicas("execute", 5)  # follower: does nothing
    assert standin.replicas(NS, PREFIX + "execute") == 2
    assert await a.is_leader() and not await b.is_leader()
    lease = standin.leases[(NS, "planner-leader")]
    assert lease["spec"]["holderIdentity"] == "planner-a"

    clock.advance(6)  # a renews (every duration/3), b keeps seeing a live lease
    assert await a.is_leader() and not await b.is_leader()
    # a stops (crash: no release). b takes over after seeing the same record for > 15 s.
    clock.advance(10)
    assert not await b.is_leader()
    clock.advance(6)
    assert await b.is_leader()
    lease = standin.leases[(NS, "planner-leader")]
    assert lease["spec"]["holderIdentity"] == "planner-b" and lease["spec"]["leaseTransitions"] == 1
    await b.set_replicas("execute", 5)
    assert standin.replicas(NS, PREFIX + "execute") == 5
    # a comes back: it sees b's lease and stays a follower.
    await a.set_replicas("execute", 1)
    assert standin.replicas(NS, PREFIX + "execute") == 5 and not await a.is_leader()
    await a.close()
    await b.close()


async def test_release_on_close_hands_over_at_once(standin: KubeStandIn) -> None:
    clock = Clock()
    a = make(standin, leader_lease="planner-leader", identity="planner-a", elector_clock=clock)
    b = make(standin, leader_lease="planner-leader", identity="planner-b", elector_clock=clock)
    assert await a.is_leader() and not await b.is_leader()
    await a.close()
    assert "holderIdentity" not in standin.leases[(NS, "planner-leader")]["spec"]
    clock.advance(1)
    assert await b.is_leader()
    await b.close()


async def test_lease_errors_do_not_crash_and_leader_steps_down(standin: KubeStandIn) -> None:
    clock = Clock()
    a = make(standin, leader_lease="planner-leader", identity="planner-a", elector_clock=clock)
    standin.fail("get", "leases", 403)
    assert not await a.is_leader()
    assert a.elector is not None and "403" in (a.elector.last_error or "")
    assert await a.is_leader()
    # The API server goes away for longer than the lease: the leader must stop acting.
    standin.fail("get", "leases", 503, times=100)
    clock.advance(6)
    assert await a.is_leader()  # within the lease it keeps leading
    clock.advance(12)
    assert not await a.is_leader()
    await a.set_replicas("execute", 7)
    assert standin.replicas(NS, PREFIX + "execute") == 0
    standin.faults.clear()
    await a.close()


async def test_actuator_uses_exactly_the_declared_permissions(standin: KubeStandIn) -> None:
    """Drive every path; what the stand-in saw must equal PERMISSIONS (which the Role grants)."""
    clock = Clock()
    act = make(
        standin,
        busy_workers=busy(f"{PREFIX}compile-abc-0"),
        leader_lease="planner-leader",
        identity="planner-a",
        elector_clock=clock,
    )
    await act.observe()
    await act.set_replicas("execute", 2)
    await act.set_replicas("compile", 1)
    clock.advance(10)
    await act.set_replicas("execute", 3)  # renews the lease (update)
    await act.close()
    seen = standin.permissions_seen()
    assert seen == {(p.group, p.resource, p.verb) for p in PERMISSIONS}


async def test_standin_rejects_bodies_the_schema_rejects(standin: KubeStandIn) -> None:
    """The stand-in is only useful if it would catch a malformed request: check that it does.

    Sent with plain urllib: the official client would refuse some of these before sending.
    """
    import json
    import urllib.error
    import urllib.request

    def send(method: str, path: str, body: object, ctype: str = "application/json") -> tuple[int, str]:
        req = urllib.request.Request(
            standin.url + path, data=json.dumps(body).encode(), method=method, headers={"Content-Type": ctype}
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    bad_lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "x"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": "fifteen"},
    }
    code, text = send("POST", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", bad_lease)
    assert code == 422 and "leaseDurationSeconds" in text
    merge = "application/merge-patch+json"
    scale = f"/apis/apps/v1/namespaces/{NS}/deployments/{PREFIX}compile/scale"
    code, text = send("PATCH", scale, {"spec": {"replicas": 1, "paused": True}}, merge)
    assert code == 422 and "paused" in text
    code, _ = send("PATCH", scale, {"spec": {"replicas": 1}}, "application/json")
    assert code == 415
    pod = f"/api/v1/namespaces/{NS}/pods/{PREFIX}compile-abc-0"
    code, _ = send(
        "PATCH", pod, {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": 5}}}, merge
    )
    assert code == 422
    assert (
        standin.replicas(NS, PREFIX + "compile") == 2
        and standin.pod_cost(NS, f"{PREFIX}compile-abc-0") is None
    )
    assert len(standin.invalid) == 3
    standin.invalid.clear()


async def test_factory_with_the_charts_planner_environment(
    standin: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env the chart gives an HA planner builds an actuator that elects a leader."""
    from distrs.actuators.kubernetes import create_kubernetes_actuator
    from distrs.config import PlannerSettings
    from tests.unit.helm.chart_render import env_of, one, render

    objs = render({"planner": {"replicas": 2}})
    planner = one(objs, "Deployment", "rel-distrs-planner")
    env = env_of(planner["spec"]["template"]["spec"]["containers"][0])
    refs = {"metadata.namespace": NS, "metadata.name": "rel-distrs-planner-7c9f-abcde"}
    for name, value in env.items():
        if name.startswith("DISTRS_") and name != "DISTRS_REDIS_URL":
            text = refs[value["fieldRef"]["fieldPath"]] if isinstance(value, dict) else value
            monkeypatch.setenv(name, text)
    settings = PlannerSettings()
    assert settings.deployment_prefix == PREFIX and settings.namespace == NS
    act = create_kubernetes_actuator(settings, ["compile", "execute"], host=standin.url)
    assert act.elector is not None and act.elector.identity == "rel-distrs-planner-7c9f-abcde"
    await act.set_replicas("compile", 4)
    assert standin.replicas(NS, PREFIX + "compile") == 4
    assert standin.leases[(NS, "rel-distrs-planner-leader")]["spec"]["holderIdentity"] == act.elector.identity
    await act.close()


async def test_scale_down_goes_ahead_when_pods_cannot_be_marked(standin: KubeStandIn) -> None:
    registry = CollectorRegistry()
    act = make(standin, busy_workers=busy(), metrics=Metrics(registry))
    standin.fail("list", "pods", 403)
    await act.set_replicas("compile", 1)
    assert standin.replicas(NS, PREFIX + "compile") == 1
    assert standin.calls_of("patch", "pods") == []
    assert (
        registry.get_sample_value("distrs_actuator_errors_total", {"stage": "compile", "reason": "forbidden"})
        == 1
    )
    await act.close()
