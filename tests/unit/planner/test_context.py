"""Building the planner's input from the memory store: the finished-request sample is read only
for reward types without history."""

from __future__ import annotations

from distrs.core.history import BatchProfile, RequestProfile
from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.core.pipeline_config import load_pipelines
from distrs.planner.context import build_context, reward_types_without_history
from distrs.scaling.context import ActiveBatch, PolicyOptions
from distrs.store.base import NewRequest
from distrs.store.memory import MemoryStore


def request(rid: str, task: str, batch: str, reward_type: str = "synthetic") -> NewRequest:
    return NewRequest(
        tenant="default",
        task=task,
        batch_id=batch,
        request_id=rid,
        reward_type=reward_type,
        route=["run"],
        payload={},
    )


async def finish_one(store: MemoryStore, now: float) -> None:
    lease = await store.lease("run", "w", now, 30.0)
    assert lease is not None
    res = Result(request_id=lease.request_id, status=Status.OK, score=1.0)
    await store.complete(Completion(lease_id=lease.lease_id, run_s=2.0, result=res), "w", now + 2.0)


async def context(store: MemoryStore, now: float):  # type: ignore[no-untyped-def]
    return await build_context(store, load_pipelines(), now, "distrs", 1.0, 10, PolicyOptions())


def profile(task: str, reward_type: str | None) -> BatchProfile:
    return BatchProfile(task, "0", 0.0, (RequestProfile(1.0, {"run": 2.0}),), reward_type)


def test_reward_types_without_history() -> None:
    batches = [ActiveBatch("a", "1", "cuda", 4, 0.0), ActiveBatch("b", "1", "cuda", 4, 0.0),
               ActiveBatch("m", "1", "math", 4, 0.0)]  # fmt: skip
    assert reward_types_without_history(batches, {}) == {"cuda", "math"}
    assert reward_types_without_history(batches, {"b": [profile("b", "cuda")]}) == {"math"}
    # A profile without a type counts as its task's current type.
    assert reward_types_without_history(batches, {"m": [profile("m", None)]}) == {"cuda"}


async def test_first_batches_carry_their_finished_requests_until_the_type_has_history() -> None:
    store = MemoryStore()
    await store.register_batch(BatchInfo(task="a", batch_id="0", size=1), 100.0)
    await store.register_batch(BatchInfo(task="b", batch_id="0", size=3), 100.0)
    await store.submit([request("r1", "b", "0"), request("r2", "b", "0")], 101.0)
    await finish_one(store, 102.0)
    ctx = await context(store, 110.0)
    first = {b.task: b for b in ctx.batches}["b"]
    assert first.finished == [{"run": 2.0}] and ctx.histories == {"a": [], "b": []}

    # Task a's batch finishes: the type now has history, so b is planned from it (pooled) and
    # the snapshot no longer reads finished requests.
    await store.submit([request("x", "a", "0")], 111.0)
    await finish_one(store, 112.0)
    await finish_one(store, 113.0)
    await store.register_batch(BatchInfo(task="a", batch_id="1", size=2), 120.0)
    ctx = await context(store, 121.0)
    assert [p.batch_id for p in ctx.histories["a"]] == ["0"]
    assert all(b.finished == () or list(b.finished) == [] for b in ctx.batches)
