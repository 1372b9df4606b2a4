"""The session-worker pool in the chart: a Deployment the planner scales (and may scale), with the
same pool shape in the proxy, the planner and the session workers; gone when sessions are off."""

from __future__ import annotations

from typing import Any

import pytest

from tests.requirements import need_module
from tests.unit.helm.chart_render import CHART, env_of, find, one, render

helm = need_module("helm_python", "the chart is rendered with it (the dev extra installs it)")
F = "rel-distrs"


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


@pytest.fixture(scope="module")
def rendered(chart: Any) -> dict[str, list[dict[str, Any]]]:
    return {"defaults": render({}, chart=chart)}


def test_session_pool_is_a_planner_scaled_worker_deployment(rendered: dict[str, Any], chart: Any) -> None:
    objs = rendered["defaults"]
    dep = one(objs, "Deployment", f"{F}-worker-sessions")
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert c["command"][:2] == ["distrs", "session-worker"] and "--stop-grace-s" in c["command"]
    assert spec["terminationGracePeriodSeconds"] > int(c["command"][c["command"].index("--stop-grace-s") + 1])
    assert (
        dep["spec"]["replicas"] == 0 and dep["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    )
    assert env_of(c)["DISTRS_SESSION_PER_WORKER"] == "200" and env_of(c)["DISTRS_SANDBOX_UID_COUNT"] == "512"
    # the planner may scale it, and sizes it with the same shape the proxy and the workers use
    role = one(objs, "Role", f"{F}-planner")
    scalable = next(r for r in role["rules"] if r["resources"] == ["deployments/scale"])
    assert f"{F}-worker-sessions" in scalable["resourceNames"]
    for name in (f"{F}-planner", f"{F}-proxy"):
        env = env_of(one(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0])
        assert env["DISTRS_SESSION_PER_WORKER"] == "200" and env["DISTRS_SESSION_MAX_WORKERS"] == "8"
    off = render({"sessions": {"enabled": False}}, chart=chart)
    assert find(off, "Deployment", f"{F}-worker-sessions") == []
    with pytest.raises(Exception, match="perWorker"):
        chart.validate_schema({"sessions": {"perWorker": 0}})
