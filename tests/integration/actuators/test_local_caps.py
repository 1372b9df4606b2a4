"""``distrs up`` bounds CPU stages near the cores available; the actuator keeps every decision
within the bound (a real worker-host process is started and resized), and the planner of
``distrs up`` plans within it."""

from __future__ import annotations

import os

from distrs.actuators.local import LocalActuator
from distrs.core.history import BatchProfile, RequestProfile
from distrs.core.pipeline_config import load_pipelines
from distrs.core.stages import ResourceClass
from distrs.local_service import local_cpu_cap, serve, stage_caps
from distrs.scaling.context import ActiveBatch, PlanContext
from tests.fixtures.service import WORKER, running_service


def test_cpu_stages_are_capped_at_the_cores_gpu_stages_are_not() -> None:
    table = load_pipelines(None)
    caps = stage_caps(table, 3)
    cpu = {n for n, s in table.stages.items() if s.resource is ResourceClass.CPU}
    assert cpu and set(caps) == cpu and set(caps.values()) == {3}
    assert "execute" not in caps  # a GPU stage
    assert stage_caps(table, None) == {}
    assert 1 <= local_cpu_cap() <= (os.cpu_count() or 1)


async def test_actuator_keeps_the_planner_decision_within_the_cap() -> None:
    with running_service(workers={}) as svc:
        act = LocalActuator(proxy_url=svc.url, token=WORKER, max_per_stage=32, stage_caps={"compile": 2})
        try:
            await act.set_replicas("compile", 10)
            assert (await act.observe())["compile"].desired == 2
            await act.set_replicas("compile", 1)
            assert (await act.observe())["compile"].desired == 1
        finally:
            await act.close()


async def test_up_plans_within_the_cpu_cap() -> None:
    table = load_pipelines(None)
    stages = [table.stages["compile"], table.stages["execute"]]
    # 20 requests that all arrive at once and take 5 s at each stage: many workers are useful
    prof = BatchProfile(
        "t", "0", 0.0, tuple(RequestProfile(0.0, {"compile": 5.0, "execute": 5.0}) for _ in range(20))
    )
    ctx = PlanContext(
        now=0.0,
        stages=stages,
        batches=[ActiveBatch("t", "1", "cuda", 20, anchor=0.0)],
        histories={"t": [prof]},
        max_extra_delay_s=0.0,
        max_replicas=16,
    )
    async with serve(port=0, insecure=True, max_workers=16, cpu_stage_cap=2) as running:
        decision = running.planner.plan_fn(ctx)
        assert running.actuator.stage_caps.get("compile") == 2
    assert decision.replicas["compile"] == 2  # CPU stage: within the cap
    assert decision.replicas["execute"] > 2  # GPU stage: not capped


async def test_up_caps_gpu_stages_when_asked() -> None:
    """``distrs up --gpu-workers 1``: one worker per GPU stage (a one-GPU machine), CPU stages apart."""
    async with serve(port=0, insecure=True, max_workers=8, cpu_stage_cap=3, gpu_stage_cap=1) as running:
        caps = dict(running.actuator.stage_caps)
    table = load_pipelines(None)
    gpu = {n for n, s in table.stages.items() if s.resource is ResourceClass.GPU}
    assert gpu and all(caps[n] == 1 for n in gpu)
    assert all(caps[n] == 3 for n in table.stages if n not in gpu)
