"""The planner loop over the memory store with a fake actuator and fake policy (pure wiring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distrs.actuators.base import StageReplicas
from distrs.config import PlannerSettings
from distrs.core.model import BatchInfo, Completion
from distrs.core.pipeline_config import load_pipelines
from distrs.planner.loop import Planner
from distrs.scaling.context import Decision, PlanContext
from distrs.store.base import NewRequest
from distrs.store.memory import MemoryStore


@dataclass
class FakeActuator:
    calls: list[tuple[str, int]] = field(default_factory=list)
    ready: dict[str, int] = field(default_factory=dict)
    fail: bool = False

    async def set_replicas(self, stage: str, n: int) -> None:
        if self.fail:
            raise RuntimeError("api down")
        self.calls.append((stage, n))
        self.ready[stage] = n

    async def observe(self) -> dict[str, StageReplicas]:
        return {s: StageReplicas(desired=n, ready=n) for s, n in self.ready.items()}

    async def close(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def setup(
    plan_replicas: int = 3, **settings: object
) -> tuple[MemoryStore, FakeActuator, Planner, list[PlanContext]]:
    store, act, seen = MemoryStore(), FakeActuator(), []

    def plan(ctx: PlanContext) -> Decision:
        seen.append(ctx)
        return Decision(replicas={s.name: plan_replicas * len(ctx.batches) for s in ctx.stages})

    p = Planner(store, act, load_pipelines(), PlannerSettings(**settings), clock=Clock(), plan_fn=plan)  # type: ignore[arg-type]
    return store, act, p, seen


async def test_batch_registration_triggers_a_plan_with_live_state() -> None:
    store, act, p, seen = setup()
    assert await p.run_once(0) is None  # no events yet
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=4, rollout_started_at=90.0), 100.0)
    await store.submit(
        [
            NewRequest(
                task="t",
                batch_id="b",
                request_id="r",
                reward_type="synthetic",
                route=["compile"],
                payload={},
            )
        ],
        101.0,
    )
    d = await p.run_once(0)
    assert d is not None and d.replicas["compile"] == 3
    ctx = seen[-1]
    (b,) = ctx.batches
    assert (b.task, b.size, b.anchor, b.submitted, dict(b.queued)) == ("t", 4, 90.0, 1, {"compile": 1})
    assert b.reward_type == "synthetic"
    assert ("compile", 3) in act.calls and ("execute", 3) in act.calls
    assert ctx.reward_stages is not None and list(ctx.reward_stages["cuda"]) == ["compile", "execute"]


async def test_replicas_are_clamped_to_settings() -> None:
    store, _act, p, _ = setup(plan_replicas=500, max_replicas=7, min_replicas=1)
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=4), 100.0)
    d = await p.run_once(0)
    assert d is not None and set(d.replicas.values()) == {7}
    _, _, idle, _ = setup(plan_replicas=0, min_replicas=1)  # no batches: the policy says 0
    d2 = await idle.decide("start")
    assert set(d2.replicas.values()) == {1}


async def test_actuator_failure_never_crashes_the_planner() -> None:
    store, act, p, _ = setup()
    act.fail = True
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=4), 100.0)
    d = await p.run_once(0)
    assert d is not None
    sample = p.metrics.registry.get_sample_value(
        "distrs_actuator_errors_total", {"stage": "compile", "reason": "RuntimeError"}
    )
    assert sample == 1.0


async def test_allocated_worker_seconds_accumulate_from_ready_replicas() -> None:
    store, act, p, _ = setup()
    act.ready = {"compile": 2, "execute": 1}
    clock = p.clock
    assert isinstance(clock, Clock)
    await p.account()
    clock.t += 10
    await p.account()
    assert p.allocated_s == {"compile": 20.0, "execute": 10.0}
    view = None
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=1), clock.t)
    await p.run_once(0)
    view = p.view()
    assert view is not None and view["allocated_worker_seconds"]["compile"] >= 20.0


async def test_histories_of_known_tasks_reach_the_policy() -> None:
    store, _act, p, seen = setup()
    await store.register_batch(BatchInfo(task="old", batch_id="b0", size=1), 100.0)
    await store.submit(
        [
            NewRequest(
                task="old",
                batch_id="b0",
                request_id="r",
                reward_type="synthetic",
                route=["compile"],
                payload={},
            )
        ],
        100.0,
    )
    await p.run_once(0)
    ls = await store.lease("compile", "w", 101.0, 30)
    assert ls is not None
    from distrs.core.model import Result, Status

    await store.complete(
        Completion(lease_id=ls.lease_id, run_s=4.0, result=Result(request_id="r", status=Status.OK)),
        "w",
        105.0,
    )
    await store.register_batch(BatchInfo(task="new", batch_id="b0", size=1), 110.0)
    await p.run_once(0)
    ctx = seen[-1]
    assert [b.task for b in ctx.batches] == ["new"]
    assert len(ctx.histories["old"]) == 1 and ctx.histories["old"][0].requests[0].s == {"compile": 4.0}


class FlakyStore(MemoryStore):
    """The memory store, unreachable for its first ``down`` snapshots (as Redis at start-up)."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down

    async def snapshot(self, now: float, finished_types: object = ()) -> Any:
        if self.down > 0:
            self.down -= 1
            raise ConnectionError("store unreachable")
        return await super().snapshot(now, finished_types)  # type: ignore[arg-type]


async def test_start_retries_until_the_store_answers() -> None:
    import asyncio

    store = FlakyStore(down=3)
    p = Planner(store, FakeActuator(), load_pipelines(), PlannerSettings(store_retry_s=0.01), clock=Clock())
    assert not p.ready and p.not_ready == "no decision yet"
    assert await p.start(asyncio.Event())
    assert p.ready and p.last is not None and store.down == 0
    errors = p.metrics.registry.get_sample_value("distrs_planner_errors_total", {"reason": "ConnectionError"})
    assert errors == 3.0


async def test_start_gives_up_only_when_stopped() -> None:
    import asyncio

    store = FlakyStore(down=10**9)
    p = Planner(store, FakeActuator(), load_pipelines(), PlannerSettings(store_retry_s=0.01), clock=Clock())
    stop = asyncio.Event()
    task = asyncio.create_task(p.start(stop))
    while store.down > 10**9 - 3:
        await asyncio.sleep(0.01)
    assert not task.done() and not p.ready and "ConnectionError" in p.not_ready
    stop.set()
    assert await task is False


async def test_the_next_decision_starts_from_the_previous_search_answer() -> None:
    store, act, seen = MemoryStore(), FakeActuator(), []

    def plan(ctx: PlanContext) -> Decision:
        seen.append(ctx)
        # the search wanted 9 compile workers; the lookahead window started only 2 of them
        return Decision(replicas={s.name: 2 for s in ctx.stages}, debug={"search": {"compile": 9}})

    p = Planner(store, act, load_pipelines(), PlannerSettings(), clock=Clock(), plan_fn=plan)
    await p.decide("start")
    assert seen[0].options.search_hint is None and seen[0].options.warm_start is None
    await p.decide("interval")
    assert seen[1].options.search_hint == {"compile": 9}  # where the search looks first
    assert seen[1].options.warm_start is not None and seen[1].options.warm_start["compile"] == 2
