"""The planner while its Redis is unreachable, against a real redis-server: at start-up it waits
and retries instead of exiting (it crash-looped on Kubernetes), reports itself not ready with the
reason, and plans as soon as Redis is back; the same when Redis dies under a running planner."""

from __future__ import annotations

import asyncio

import pytest

from distrs.config import PlannerSettings
from distrs.core.model import BatchInfo
from distrs.core.pipeline_config import load_pipelines
from distrs.metrics import Metrics
from distrs.planner.loop import Planner
from distrs.scaling.context import Decision, PlanContext
from distrs.store.factory import create_store
from tests.fixtures.redis_server import RedisServer
from tests.unit.planner.test_loop import FakeActuator

pytestmark = pytest.mark.redis


def plan(ctx: PlanContext) -> Decision:
    return Decision(replicas={s.name: len(ctx.batches) for s in ctx.stages})


async def wait_until(cond: object, cap_s: float = 60.0) -> None:
    """Poll ``cond()`` (a cap, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + cap_s
    while not cond():  # type: ignore[operator]
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.05)


async def test_planner_waits_for_redis_at_start_and_after_a_crash(fresh_redis_server: RedisServer) -> None:
    redis = fresh_redis_server
    redis.kill()  # down before the planner starts
    settings = PlannerSettings(
        redis_url=redis.url, store_retry_s=0.2, interval_s=0.2, redis_connect_timeout_s=0.5
    )
    store = create_store(settings)
    await store.start()
    metrics = Metrics()
    planner = Planner(store, FakeActuator(), load_pipelines(), settings, metrics=metrics, plan_fn=plan)
    stop = asyncio.Event()
    task = asyncio.create_task(planner.run(stop))
    try:
        await wait_until(lambda: _errors(metrics) >= 2)
        assert not task.done(), "the planner exited while Redis was down"
        assert not planner.ready and "start-up decision failed" in planner.not_ready
        redis.restart()  # same port and data directory
        await wait_until(lambda: planner.ready)
        assert planner.last is not None
        # Redis dies under a running planner: not ready, still alive; back: plans again
        redis.kill()
        await wait_until(lambda: not planner.ready)
        assert not task.done() and "planner iteration failed" in planner.not_ready
        redis.restart()
        await store.register_batch(BatchInfo(task="t/x", batch_id="b", size=2), 0.0)  # a trigger
        await wait_until(
            lambda: planner.ready and planner.last is not None and planner.last.replicas.get("verify") == 1
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await store.close()


def _errors(metrics: Metrics) -> float:
    total = 0.0
    for fam in metrics.registry.collect():
        if fam.name == "distrs_planner_errors":
            total += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return total
