"""One conformance suite for every QueueStore: memory, Redis, Redis Cluster and Sentinel-managed
Redis must behave identically.

Each test runs once per implementation (``store`` is parametrized). The Redis runs use a real
``redis-server`` (tests/fixtures/redis_server.py), the cluster runs a real 3-primary, 3-replica
Redis Cluster (tests/fixtures/redis_cluster.py), the sentinel runs a real primary, replica and
three Sentinels (tests/fixtures/redis_sentinel.py), each with a fresh key namespace per test. All times
are passed in, so nothing here sleeps except the wake-up tests, which wait well under a second.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from distrs.config import StoreSettings
from distrs.core.history import BatchProfile
from distrs.core.model import BatchInfo, Completion, RequestState, Result, Status
from distrs.core.priority import QueuePolicy
from distrs.store.base import CompleteOutcome, NewRequest, QueueStore
from distrs.store.errors import (
    BatchConflict,
    BatchFull,
    LeaseExpired,
    LeaseNotYours,
    NoNextStage,
    StoreError,
    UnknownBatch,
    UnknownLease,
)
from distrs.store.memory import MemoryStore
from distrs.store.redis import RedisStore

SPAN = 600.0
# the route of the requests here (a synthetic request's that spends time at both stages)
ROUTE = ("compile", "execute")
MakeStore = Callable[..., Awaitable[QueueStore]]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
        pytest.param("sentinel", marks=pytest.mark.redis),
    ]
)
def backend(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    """None for memory, else (redis mode, the URL of the session's redis-server, a cluster seed or
    the Sentinels)."""
    if request.param == "memory":
        return None
    if request.param == "cluster":
        return "cluster", str(request.getfixturevalue("redis_cluster").url)
    if request.param == "sentinel":
        return "sentinel", str(request.getfixturevalue("redis_sentinel").url)
    return "standalone", str(request.getfixturevalue("redis_server").url)


@pytest.fixture
async def make_store(backend: tuple[str, str] | None) -> AsyncIterator[MakeStore]:
    made: list[QueueStore] = []

    async def make(
        policy: QueuePolicy = QueuePolicy.EBF, history_batches: int = 8, wake_poll_s: float = 1.0
    ) -> QueueStore:
        store: QueueStore
        if backend is None:
            store = MemoryStore(policy=policy, history_batches=history_batches, default_batch_span_s=SPAN)
        else:
            mode, url = backend
            settings = StoreSettings.model_validate(
                {
                    "redis_url": url,
                    "redis_mode": mode,
                    "queue_policy": policy,
                    "history_batches": history_batches,
                    "default_batch_span_s": SPAN,
                }
            )
            store = RedisStore.from_url(
                url, settings, namespace=f"t-{uuid.uuid4().hex[:12]}", wake_poll_s=wake_poll_s
            )
        await store.start()
        made.append(store)
        return store

    yield make
    for s in made:
        if isinstance(s, RedisStore):
            await s.flush_namespace()
        await s.close()


@pytest.fixture
async def store(make_store: MakeStore) -> QueueStore:
    return await make_store()


def req(rid: str, task: str = "t", batch: str = "b", tenant: str = "default", stage: str = "compile",
        **payload: Any) -> NewRequest:  # fmt: skip
    return NewRequest(
        tenant=tenant,
        task=task,
        batch_id=batch,
        request_id=rid,
        reward_type="synthetic",
        route=list(ROUTE[ROUTE.index(stage) :]) if stage in ROUTE else [stage],
        payload=payload or {"n": rid},
    )


def ok(rid: str = "", score: float = 1.0) -> Result:
    return Result(request_id=rid, status=Status.OK, score=score)


async def register(store: QueueStore, batch: str = "b", size: int = 2, task: str = "t", now: float = 100.0,
                   **kw: Any) -> BatchInfo:  # fmt: skip
    info, _ = await store.register_batch(BatchInfo(task=task, batch_id=batch, size=size, **kw), now)
    return info


async def drain(store: QueueStore, stage: str, now: float) -> list[str]:
    """Lease everything queued at ``stage``; the request ids in lease order."""
    out = []
    while (lease := await store.lease(stage, "w", now, 30.0)) is not None:
        out.append(lease.request_id)
    return out


# batches ---------------------------------------------------------------------------------------


async def test_register_batch_is_idempotent_and_estimates_completion(store: QueueStore) -> None:
    info, created = await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 100.0)
    assert created
    assert info.registered_at == 100.0
    assert info.estimated_completion == pytest.approx(100.0 + SPAN)  # no history: default span
    again, created2 = await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 150.0)
    assert not created2
    assert again.registered_at == 100.0
    got = await store.get_batch("t", "b")
    assert got is not None and got.size == 3 and got.submitted == 0
    assert await store.get_batch("t", "nope") is None


async def test_rollout_hint_is_the_anchor(store: QueueStore) -> None:
    info = await register(store, rollout_started_at=40.0)
    assert info.rollout_started_at == 40.0
    assert info.estimated_completion == pytest.approx(40.0 + SPAN)


async def test_register_conflicts(store: QueueStore) -> None:
    await register(store, size=2, reward_type="cuda")
    with pytest.raises(BatchConflict) as e:
        await register(store, size=3, reward_type="cuda")
    assert e.value.status == 409 and e.value.details["field"] == "size"
    with pytest.raises(BatchConflict):
        await register(store, size=2, reward_type="cpp")
    same, created = await store.register_batch(BatchInfo(task="t", batch_id="b", size=2), 101.0)
    assert not created and same.reward_type == "cuda"  # no type given: no conflict


async def test_tenant_isolation(store: QueueStore) -> None:
    await store.register_batch(BatchInfo(tenant="alice", task="t", batch_id="b", size=2), 100.0)
    with pytest.raises(UnknownBatch):
        await store.register_batch(BatchInfo(tenant="bob", task="t", batch_id="b2", size=2), 100.0)
    with pytest.raises(UnknownBatch):
        await store.submit([req("r1", tenant="bob")], 101.0)
    out = await store.submit([req("r1", tenant="alice")], 101.0)
    assert out.accepted == ["r1"]
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.tenant == "alice"
    # another task name is free for bob
    _, created = await store.register_batch(BatchInfo(tenant="bob", task="t2", batch_id="b", size=1), 100.0)
    assert created


# submit ----------------------------------------------------------------------------------------


async def test_submit_is_idempotent(store: QueueStore) -> None:
    await register(store, size=3)
    first = await store.submit([req("r1"), req("r2"), req("r1")], 101.0)
    assert first.accepted == ["r1", "r2"] and first.duplicates == ["r1"]
    second = await store.submit([req("r2"), req("r3")], 102.0)
    assert second.accepted == ["r3"] and second.duplicates == ["r2"]
    batch = await store.get_batch("t", "b")
    assert batch is not None
    assert batch.submitted == 3 and batch.first_arrival_at == 101.0 and batch.reward_type == "synthetic"
    assert sorted(await drain(store, "compile", 103.0)) == ["r1", "r2", "r3"]  # each queued once


async def test_request_id_is_idempotent_per_task_across_batches(store: QueueStore) -> None:
    """The README's promise: ``request_id`` is idempotent within a *task*, not within a batch. The
    same id in a second batch of the same task is a duplicate, never queued, never leased again,
    and does not count towards the second batch's size; another task may use the id freely."""
    await register(store, batch="b1", size=1)
    await register(store, batch="b2", size=2)
    await register(store, batch="b1", size=1, task="other")
    assert (await store.submit([req("r1", batch="b1")], 101.0)).accepted == ["r1"]
    lease = await store.lease("compile", "w", 102.0, 30.0)
    assert lease is not None and lease.request_id == "r1"
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1")), "w", 103.0)
    again = await store.submit([req("r1", batch="b2"), req("r2", batch="b2")], 104.0)
    assert again.accepted == ["r2"] and again.duplicates == ["r1"]
    b2 = await store.get_batch("t", "b2")
    assert b2 is not None and b2.submitted == 1  # the duplicate took no place in b2
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.batch_id == "b1" and rec.state == RequestState.DONE
    assert await drain(store, "compile", 105.0) == ["r2"]  # r1 is never leased a second time
    # still a duplicate while the first submission is queued (not only once it is done)
    assert (await store.submit([req("r9", batch="b2")], 106.0)).accepted == ["r9"]
    third = await store.submit([req("r9", batch="b1")], 107.0)
    assert third.duplicates == ["r9"] and third.accepted == []
    assert await store.lease("compile", "w", 108.0, 30.0) is not None
    assert await store.lease("compile", "w", 108.0, 30.0) is None  # r9 queued once only
    # the same id in another task is another request
    assert (await store.submit([req("r1", task="other", batch="b1")], 109.0)).accepted == ["r1"]


async def test_submit_unknown_batch_enqueues_nothing(store: QueueStore) -> None:
    await register(store, size=5)
    with pytest.raises(UnknownBatch) as e:
        await store.submit([req("r1"), req("r2", batch="missing")], 101.0)
    assert e.value.status == 404
    assert await store.get_request("t", "r1") is None
    assert await store.lease("compile", "w", 102.0, 30.0) is None


async def test_batch_full_is_all_or_nothing(store: QueueStore) -> None:
    await register(store, size=2)
    await register(store, batch="other", size=5)
    with pytest.raises(BatchFull) as e:
        await store.submit([req("x1", batch="other"), req("r1"), req("r2"), req("r3")], 101.0)
    assert e.value.status == 409
    assert await store.get_request("t", "x1") is None
    assert (await store.get_batch("t", "b")).submitted == 0  # type: ignore[union-attr]
    out = await store.submit([req("r1"), req("r2")], 101.0)
    assert out.accepted == ["r1", "r2"]
    with pytest.raises(BatchFull):
        await store.submit([req("r3")], 102.0)
    dup = await store.submit([req("r1")], 102.0)  # a duplicate is not over the size
    assert dup.duplicates == ["r1"]


# queue order -----------------------------------------------------------------------------------


async def test_ebf_orders_batches_by_estimated_completion_and_fcfs_within(store: QueueStore) -> None:
    # "late" is submitted first but its rollout started later, so its T is later.
    await register(store, batch="late", size=3, rollout_started_at=90.0)
    await register(store, batch="early", size=3, rollout_started_at=10.0)
    await store.submit([req("l1", batch="late"), req("l2", batch="late")], 100.0)
    await store.submit([req("e1", batch="early"), req("e2", batch="early")], 101.0)
    await store.submit([req("l3", batch="late"), req("e3", batch="early")], 102.0)
    assert await drain(store, "compile", 103.0) == ["e1", "e2", "e3", "l1", "l2", "l3"]


async def test_fcfs_policy_is_arrival_order(make_store: MakeStore) -> None:
    store = await make_store(policy=QueuePolicy.FCFS)
    await register(store, batch="late", size=3, rollout_started_at=90.0)
    await register(store, batch="early", size=3, rollout_started_at=10.0)
    await store.submit([req("l1", batch="late"), req("l2", batch="late")], 100.0)
    await store.submit([req("e1", batch="early"), req("e2", batch="early")], 101.0)
    await store.submit([req("l3", batch="late"), req("e3", batch="early")], 102.0)
    assert await drain(store, "compile", 103.0) == ["l1", "l2", "e1", "e2", "l3", "e3"]


async def test_queues_are_per_stage(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1", stage="compile"), req("r2", stage="verify")], 101.0)
    assert await drain(store, "verify", 102.0) == ["r2"]
    assert await drain(store, "compile", 102.0) == ["r1"]
    assert await store.lease("execute", "w", 102.0, 30.0) is None


# leases ----------------------------------------------------------------------------------------


async def test_lease_heartbeat_complete(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1", code="x")], 101.0)
    lease = await store.lease("compile", "w1", 103.0, 30.0)
    assert lease is not None
    assert (lease.request_id, lease.task, lease.batch_id, lease.stage) == ("r1", "t", "b", "compile")
    assert lease.payload == {"code": "x"} and lease.attempt == 1 and lease.worker_id == "w1"
    assert lease.deadline == pytest.approx(133.0)
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.state is RequestState.RUNNING and rec.attempts == 1
    assert await store.lease("compile", "w2", 103.0, 30.0) is None  # handed out once
    assert await store.heartbeat(lease.lease_id, "w1", 120.0, 30.0) == pytest.approx(150.0)
    held = await store.get_lease(lease.lease_id)  # type: ignore[attr-defined]
    assert held is not None and held.model_dump() == {**lease.model_dump(), "deadline": pytest.approx(150.0)}
    out = await store.complete(
        Completion(lease_id=lease.lease_id, run_s=2.5, result=ok("r1", 0.75)), "w1", 140.0
    )
    assert out.batch_completed
    assert out.request.state is RequestState.DONE and out.request.result is not None
    assert await store.get_lease(lease.lease_id) is None  # type: ignore[attr-defined]
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.state is RequestState.DONE and rec.result is not None
    assert rec.result.status is Status.OK and rec.result.score == 0.75
    st = rec.result.stages
    assert [(s.name, s.worker, s.outcome) for s in st] == [("compile", "w1", "final")]
    assert st[0].queued_s == pytest.approx(2.0) and st[0].run_s == pytest.approx(2.5)
    with pytest.raises(UnknownLease):  # finished leases no longer exist
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1")), "w1", 141.0)


async def test_lease_errors(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 101.0)
    lease = await store.lease("compile", "w1", 102.0, 10.0)
    assert lease is not None
    with pytest.raises(UnknownLease) as e1:
        await store.heartbeat("nope", "w1", 103.0, 10.0)
    assert e1.value.status == 404
    with pytest.raises(LeaseNotYours) as e2:
        await store.heartbeat(lease.lease_id, "w2", 103.0, 10.0)
    assert e2.value.status == 403
    with pytest.raises(LeaseNotYours):
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok()), "w2", 103.0)
    with pytest.raises(LeaseExpired) as e3:
        await store.heartbeat(lease.lease_id, "w1", 113.0, 10.0)
    assert e3.value.status == 409
    with pytest.raises(LeaseExpired):
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok()), "w1", 113.0)
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.state is RequestState.RUNNING and rec.result is None


async def test_released_lease_goes_back_to_its_place_without_an_attempt(store: QueueStore) -> None:
    await register(store, size=3)
    await store.submit([req("r1"), req("r2"), req("r3")], 100.0)
    first = await store.lease("compile", "w1", 101.0, 10.0)
    assert first is not None and first.request_id == "r1" and first.attempt == 1
    with pytest.raises(LeaseNotYours):
        await store.release(first.lease_id, "w2", 102.0)
    with pytest.raises(UnknownLease):
        await store.release("nope", "w1", 102.0)
    assert await store.release(first.lease_id, "w1", 102.0) == "compile"
    with pytest.raises(UnknownLease):  # given back: gone
        await store.release(first.lease_id, "w1", 102.5)
    snap = await store.snapshot(103.0)
    assert snap.running == {} and snap.queue_depth == {"compile": 3}
    assert snap.batches[0].queued_since == {"compile": [pytest.approx(100.0)] * 3}
    again = await store.lease("compile", "w2", 103.0, 10.0)  # ahead of r2, attempt not counted
    assert again is not None and again.request_id == "r1" and again.attempt == 1
    late = await store.lease("compile", "w3", 103.0, 1.0)
    assert late is not None
    with pytest.raises(LeaseExpired):
        await store.release(late.lease_id, "w3", 105.0)
    assert not [e for e in await store.events("0", 0) if e.type == "lease_expired"]


async def test_expired_lease_is_requeued_then_internal_error(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1"), req("r2")], 100.0)
    first = await store.lease("compile", "w1", 101.0, 5.0)
    assert first is not None and first.request_id == "r1"
    assert await store.requeue_expired(105.0, max_attempts=2) == []  # not yet past the deadline
    assert await store.requeue_expired(107.0, max_attempts=2) == [("r1", "compile")]
    assert await store.get_lease(first.lease_id) is None
    with pytest.raises(UnknownLease):
        await store.heartbeat(first.lease_id, "w1", 107.0, 5.0)
    again = await store.lease("compile", "w2", 108.0, 5.0)  # back ahead of r2 (FCFS in batch)
    assert again is not None and again.request_id == "r1" and again.attempt == 2
    assert await store.requeue_expired(120.0, max_attempts=2) == [("r1", "compile")]
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.state is RequestState.DONE and rec.result is not None
    assert rec.result.status is Status.INTERNAL_ERROR
    assert rec.result.stages[-1].outcome == "lease_expired"
    assert [r.request_id for r in await store.batch_results("t", "b")] == ["r1"]
    evs = [e for e in await store.events("0", 0) if e.type == "lease_expired"]
    assert [(e.data["stage"], e.data["attempt"]) for e in evs] == [("compile", 1), ("compile", 2)]
    assert await drain(store, "compile", 121.0) == ["r2"]


async def test_multi_stage_with_artifacts(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 100.0)
    c = await store.lease("compile", "wc", 101.0, 30.0)
    assert c is not None and c.artifacts == {}
    out = await store.complete(
        Completion(lease_id=c.lease_id, outcome="next", run_s=3.0, artifacts={"binary": "QUJD"}), "wc", 104.0
    )
    assert not out.batch_completed
    assert out.request.stage == "execute" and out.request.state is RequestState.QUEUED
    assert await store.lease("compile", "wc", 104.0, 30.0) is None
    x = await store.lease("execute", "wx", 106.0, 30.0)
    assert x is not None and x.artifacts == {"binary": "QUJD"} and x.attempt == 1
    done = await store.complete(Completion(lease_id=x.lease_id, run_s=4.0, result=ok("r1")), "wx", 110.0)
    assert done.batch_completed
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.result is not None
    assert [(s.name, s.worker, s.outcome) for s in rec.result.stages] == [
        ("compile", "wc", "next"),
        ("execute", "wx", "final"),
    ]
    assert [s.queued_s for s in rec.result.stages] == pytest.approx([1.0, 2.0])
    assert [s.run_s for s in rec.result.stages] == pytest.approx([3.0, 4.0])


async def test_final_without_result_is_internal_error(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 100.0)
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0), "w", 102.0)
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.result is not None and rec.result.status is Status.INTERNAL_ERROR


async def test_next_follows_the_route_given_at_submit(store: QueueStore) -> None:
    """The route decided at submit is the request's: ``next`` takes it to the stage after the
    current one on it (here one that skips ``execute``), and the record carries it."""
    await register(store, size=1)
    routed = req("r1").model_copy(update={"route": ["compile", "verify"]})
    await store.submit([routed], 100.0)
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.route == ["compile", "verify"] and rec.stage == "compile"
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None
    out = await store.complete(Completion(lease_id=lease.lease_id, outcome="next", run_s=1.0), "w", 102.0)
    assert out.next_stage == "verify" and out.request.stage == "verify"
    assert out.request.route == ["compile", "verify"]
    assert await store.lease("execute", "w", 103.0, 30.0) is None
    held = await store.lease("verify", "w", 103.0, 30.0)
    assert held is not None and held.request_id == "r1"
    done = await store.complete(Completion(lease_id=held.lease_id, run_s=1.0, result=ok("r1")), "w", 104.0)
    assert done.next_stage is None and done.batch_completed
    assert done.request.result is not None
    assert [s.name for s in done.request.result.stages] == ["compile", "verify"]


async def test_next_at_the_end_of_the_route_is_refused_and_changes_nothing(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1", stage="execute"), req("r2", stage="verify")], 100.0)
    lease = await store.lease("execute", "w", 101.0, 30.0)
    assert lease is not None
    before = await store.get_request("t", "r1")
    with pytest.raises(NoNextStage) as refused:
        await store.complete(Completion(lease_id=lease.lease_id, outcome="next", run_s=1.0), "w", 102.0)
    assert refused.value.status == 422 and refused.value.details == {"field": "outcome"}
    assert "'execute'" in refused.value.message
    assert await store.get_request("t", "r1") == before  # still running, no stage record
    assert await store.get_lease(lease.lease_id) == lease  # still held, as it was
    # a bundle: the refused item answers for itself, the others land
    other = await store.lease("verify", "w", 103.0, 30.0)
    assert other is not None
    items = [Completion(lease_id=lease.lease_id, outcome="next"), final(other.lease_id, "r2")]
    refused_item, landed = await store.complete_many(items, "w", 104.0)
    assert isinstance(refused_item, NoNextStage)
    assert isinstance(landed, CompleteOutcome) and landed.request.result is not None
    out = await store.complete(final(lease.lease_id, "r1"), "w", 105.0)
    assert out.batch_completed and out.request.stages[-1].outcome == "final"


async def test_store_route_only_where_none_is_stored(store: QueueStore) -> None:
    """A request of a release that stored its first stage only (in Redis a hash without
    ``route``: the very hash submit writes for a route of one stage) is refused ``next``; once
    its route is stored, the same ``next`` moves it on and it finishes. A stored route is never
    replaced, a route of one stage is not stored, and an unknown request is not created."""
    await register(store, size=2)
    await store.submit([req("old").model_copy(update={"route": ["compile"]}), req("new")], 100.0)
    if isinstance(store, RedisStore):
        client: Any = store.topology.client
        assert not await client.hexists(store.keys.request("t", "old"), "route")
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None and lease.request_id == "old"
    nxt = Completion(lease_id=lease.lease_id, outcome="next", run_s=1.0, artifacts={"bin": "x"})
    with pytest.raises(NoNextStage):
        await store.complete(nxt, "w", 102.0)
    assert not await store.store_route("t", "old", ["compile"])  # one stage: stored as none
    assert await store.store_route("t", "old", ["compile", "execute"])
    assert not await store.store_route("t", "old", ["compile", "verify"])  # kept, not replaced
    rec = await store.get_request("t", "old")
    assert rec is not None and rec.route == ["compile", "execute"] and rec.stage == "compile"
    assert rec.state is RequestState.RUNNING and rec.stages == []  # nothing else changed
    out = await store.complete(nxt, "w", 103.0)
    assert out.next_stage == "execute" and out.request.artifacts == {"bin": "x"}
    held = await store.lease("execute", "w", 104.0, 30.0)
    assert held is not None and held.request_id == "old" and held.artifacts == {"bin": "x"}
    done = await store.complete(final(held.lease_id, "old"), "w", 105.0)
    assert done.request.result is not None and done.request.result.status is Status.OK
    assert [s.name for s in done.request.result.stages] == ["compile", "execute"]
    assert not await store.store_route("t", "new", ["compile", "verify"])  # has its own
    rec = await store.get_request("t", "new")
    assert rec is not None and rec.route == list(ROUTE)
    assert not await store.store_route("t", "gone", ["compile", "execute"])
    assert await store.get_request("t", "gone") is None


# results, history, events ---------------------------------------------------------------------


async def test_results_in_submission_order(store: QueueStore) -> None:
    await register(store, size=3)
    await store.submit([req("a"), req("b"), req("c")], 100.0)
    leases = [await store.lease("compile", "w", 101.0, 30.0) for _ in range(3)]
    assert all(leases)
    for lease, score in zip(reversed(leases), (0.3, 0.2), strict=False):  # c then b finish first
        assert lease is not None
        await store.complete(
            Completion(lease_id=lease.lease_id, run_s=1.0, result=ok(lease.request_id, score)), "w", 102.0
        )
    res = await store.batch_results("t", "b")
    assert [(r.request_id, r.score) for r in res] == [("b", 0.2), ("c", 0.3)]
    assert leases[0] is not None
    await store.complete(Completion(lease_id=leases[0].lease_id, run_s=1.0, result=ok("a", 0.1)), "w", 103.0)
    assert [r.request_id for r in await store.batch_results("t", "b")] == ["a", "b", "c"]
    assert await store.batch_results("t", "unknown") == []


async def _run_batch(store: QueueStore, batch: str, now: float, durations: dict[str, float]) -> None:
    """Submit one request per entry at now+1, run each for its duration, all finishing in order."""
    await register(store, batch=batch, size=len(durations), now=now)
    await store.submit([req(rid, batch=batch) for rid in durations], now + 1)
    t = now + 2
    for rid, dur in durations.items():
        lease = await store.lease("compile", "w", t, 60.0)
        assert lease is not None and lease.request_id == rid
        t += dur
        await store.complete(Completion(lease_id=lease.lease_id, run_s=dur, result=ok(rid)), "w", t)


async def test_batch_completion_history_event_and_extra_delay(store: QueueStore) -> None:
    await _run_batch(store, "b1", 100.0, {"r1": 2.0, "r2": 3.0})
    batch = await store.get_batch("t", "b1")
    assert batch is not None and batch.complete and batch.done == 2
    # r_i = 1 (arrival 101 after anchor 100); T = anchor + max(1+2, 1+3) = 104; finished at 107
    assert batch.completed_at == pytest.approx(107.0)
    assert batch.earliest_completion == pytest.approx(104.0)
    assert batch.extra_delay_s == pytest.approx(3.0)
    hist = await store.history("t")
    assert len(hist) == 1 and isinstance(hist[0], BatchProfile)
    prof = hist[0]
    assert (prof.task, prof.batch_id, prof.anchor, prof.reward_type) == ("t", "b1", 100.0, "synthetic")
    assert [(q.r, q.s, q.status) for q in prof.requests] == [
        (pytest.approx(1.0), {"compile": pytest.approx(2.0)}, "ok"),
        (pytest.approx(1.0), {"compile": pytest.approx(3.0)}, "ok"),
    ]
    ev = [e for e in await store.events("0", 0) if e.type == "batch_completed"]
    assert len(ev) == 1 and (ev[0].task, ev[0].batch_id) == ("t", "b1")
    assert ev[0].data["extra_delay_s"] == pytest.approx(3.0)
    assert ev[0].data["earliest_completion"] == pytest.approx(104.0)
    # the next batch of the task is estimated from this history (Eq. 1-2): anchor + 4
    nxt = await register(store, batch="b2", now=200.0)
    assert nxt.estimated_completion == pytest.approx(204.0)
    snap = await store.snapshot(201.0)
    assert [b.batch.batch_id for b in snap.batches] == ["b2"]  # finished batches are not active


async def test_history_keeps_last_k(make_store: MakeStore) -> None:
    store = await make_store(history_batches=2)
    for i in range(3):
        await _run_batch(store, f"b{i}", 100.0 * (i + 1), {"r" + str(i): 1.0 + i})
    hist = await store.history("t")
    assert [h.batch_id for h in hist] == ["b1", "b2"]
    assert await store.history("other") == []


async def test_events_after_id(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 101.0)
    evs = await store.events("0", 0)
    assert [e.type for e in evs] == ["batch_registered", "first_arrival"]
    assert evs[0].data["size"] == 1 and evs[0].ts == 100.0 and evs[1].ts == 101.0
    assert [e.type for e in await store.events("0", 0, count=1)] == ["batch_registered"]
    assert await store.events(evs[-1].id, 0) == []
    await register(store, batch="b2", size=1, now=102.0)
    later = await store.events(evs[-1].id, 0.05)
    assert [(e.type, e.batch_id) for e in later] == [("batch_registered", "b2")]


async def test_events_wait_for_a_new_event(store: QueueStore) -> None:
    await register(store, size=1)
    last = (await store.events("0", 0))[-1].id
    waiter = asyncio.create_task(store.events(last, 5.0))
    await asyncio.sleep(0.05)
    await store.submit([req("r1")], 101.0)
    got = await asyncio.wait_for(waiter, 2.0)
    assert [e.type for e in got] == ["first_arrival"]


async def test_snapshot_contents(store: QueueStore) -> None:
    await register(store, batch="b", size=3, rollout_started_at=90.0)
    await register(store, batch="idle", size=1)
    await store.submit([req("r1"), req("r2"), req("r3")], 100.0)
    lease = await store.lease("compile", "w", 102.0, 30.0)
    assert lease is not None
    await store.complete(Completion(lease_id=lease.lease_id, outcome="next", run_s=2.0), "w", 104.0)
    lease2 = await store.lease("compile", "w", 105.0, 30.0)
    assert lease2 is not None
    snap = await store.snapshot(110.0)
    assert snap.now == 110.0
    by_id = {b.batch.batch_id: b for b in snap.batches}
    assert set(by_id) == {"b", "idle"}
    live = by_id["b"]
    assert live.batch.submitted == 3 and live.batch.estimated_completion == pytest.approx(90.0 + SPAN)
    assert live.queued == {"compile": 1, "execute": 1}
    assert live.queued_since["compile"] == [pytest.approx(100.0)]
    assert live.queued_since["execute"] == [pytest.approx(104.0)]
    assert live.running_elapsed == {"compile": [pytest.approx(5.0)]}
    assert by_id["idle"].queued == {} and by_id["idle"].running_elapsed == {}
    assert snap.queue_depth == {"compile": 1, "execute": 1}
    assert snap.running == {"compile": 1}


async def test_snapshot_shows_the_stage_times_of_finished_requests(store: QueueStore) -> None:
    # A first batch learns its stage times from its own finished requests (scaling/fallback.py).
    await register(store, batch="b", size=3)
    await store.submit([req("r1"), req("r2"), req("r3")], 100.0)
    for stage, start, run_s, then in (("compile", 101.0, 3.0, "execute"), ("execute", 105.0, 1.5, None),
                                      ("compile", 107.0, 2.0, None)):  # fmt: skip
        lease = await store.lease(stage, "w", start, 30.0)
        assert lease is not None
        result, status = (None, "next") if then else (ok(), "final")
        await store.complete(
            Completion(lease_id=lease.lease_id, outcome=status, run_s=run_s, result=result),
            "w",
            start + run_s,
        )
    before = {
        b.batch.batch_id: b for b in (await store.snapshot(110.0, finished_types={"synthetic"})).batches
    }["b"]
    assert sorted(before.finished, key=len) == [
        {"compile": pytest.approx(2.0)},
        {"compile": pytest.approx(3.0), "execute": pytest.approx(1.5)},
    ]
    # Only the reward types asked for carry the sample (the planner asks while a type has no history).
    for types in ((), {"math"}):
        plain = {b.batch.batch_id: b for b in (await store.snapshot(110.0, finished_types=types)).batches}
        assert plain["b"].finished == [] and plain["b"].running_elapsed == before.running_elapsed


# waiting ---------------------------------------------------------------------------------------


async def test_wait_for_work_wakes_on_submit(store: QueueStore) -> None:
    await register(store, size=1)
    assert await store.lease("compile", "w", 100.0, 30.0) is None
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    waiter = asyncio.create_task(store.wait_for_work("compile", 5.0))
    await asyncio.sleep(0.05)
    await store.submit([req("r1")], 101.0)
    await asyncio.wait_for(waiter, 3.0)
    assert loop.time() - t0 < 0.9  # woken, not timed out (the shortest internal re-check is 1 s)
    assert await store.lease("compile", "w", 101.0, 30.0) is not None


@pytest.mark.parametrize("how", ["requeue_expired", "release"])
async def test_a_requeue_wakes_a_waiting_long_poll_at_once(make_store: MakeStore, how: str) -> None:
    """docs/security.md: the requeue of a lost lease wakes a waiting worker's long-poll at once
    (and so does a release). The waiter's own timeout (30 s) and Redis's safety re-check (set to
    60 s here, 1 s by default) are far past the cap, so a waiter that returned was woken by the
    requeue itself, not by a timer: no real-clock threshold."""
    store = await make_store(wake_poll_s=60.0)
    await register(store, size=1)
    await store.submit([req("r1")], 100.0)
    lease = await store.lease("compile", "w1", 100.0, 5.0)
    assert lease is not None
    assert await store.lease("compile", "w2", 100.0, 5.0) is None  # nothing left: w2 parks
    waiter = asyncio.create_task(store.wait_for_work("compile", 30.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    if how == "requeue_expired":
        assert await store.requeue_expired(106.0, 3) == [("r1", "compile")]
    else:
        assert await store.release(lease.lease_id, "w1", 101.0) == "compile"
    await asyncio.wait_for(waiter, 10.0)  # a cap only: woken, not after its 30 s
    again = await store.lease("compile", "w2", 106.0, 5.0)
    assert again is not None and again.request_id == "r1"


async def test_wait_for_work_times_out(store: QueueStore) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await store.wait_for_work("compile", 0.1)
    assert 0.05 <= loop.time() - t0 < 1.0


async def test_wait_batch_wakes_on_result(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1"), req("r2")], 100.0)
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None
    assert await store.batch_results("t", "b") == []
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    waiter = asyncio.create_task(store.wait_batch("t", "b", 5.0))
    await asyncio.sleep(0.05)
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1")), "w", 102.0)
    await asyncio.wait_for(waiter, 3.0)
    assert loop.time() - t0 < 0.9
    assert [r.request_id for r in await store.batch_results("t", "b")] == ["r1"]


async def test_wait_batch_until_complete_is_not_woken_by_each_result(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1"), req("r2")], 100.0)
    first = await store.lease("compile", "w", 101.0, 30.0)
    second = await store.lease("compile", "w", 101.0, 30.0)
    assert first is not None and second is not None
    batch = await store.get_batch("t", "b")
    assert batch is not None and not batch.complete
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(store.wait_batch("t", "b", 5.0, until_complete=True))
    await asyncio.sleep(0.05)
    await store.complete(Completion(lease_id=first.lease_id, run_s=1.0, result=ok("r1")), "w", 102.0)
    await asyncio.sleep(0.1)
    assert not waiter.done()  # one result of two: not complete
    t0 = loop.time()
    await store.complete(Completion(lease_id=second.lease_id, run_s=1.0, result=ok("r2")), "w", 103.0)
    await asyncio.wait_for(waiter, 3.0)
    assert loop.time() - t0 < 0.9  # woken by the completion, not by the re-check interval
    batch = await store.get_batch("t", "b")
    assert batch is not None and batch.complete


async def test_a_completion_between_the_read_and_the_wait_is_not_missed(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 100.0)
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None
    batch = await store.get_batch("t", "b")
    assert batch is not None and not batch.complete
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1")), "w", 102.0)
    await asyncio.sleep(0.05)  # the wake-up has come and gone
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await store.wait_batch("t", "b", 5.0, until_complete=True)
    assert loop.time() - t0 < 0.5


async def test_ping(store: QueueStore) -> None:
    assert await store.ping()


async def test_requeue_many_expired_leases(store: QueueStore) -> None:
    n = 450  # more than one requeue chunk of the Redis store
    await register(store, size=n)
    await store.submit([req(f"r{i:03d}") for i in range(n)], 100.0)
    for _ in range(n):
        assert await store.lease("compile", "w", 101.0, 5.0) is not None
    requeued = await store.requeue_expired(110.0, max_attempts=3)
    assert sorted(requeued) == [(f"r{i:03d}", "compile") for i in range(n)]
    assert await drain(store, "compile", 111.0) == [f"r{i:03d}" for i in range(n)]  # original order
    snap = await store.snapshot(112.0)
    assert snap.running == {"compile": n} and snap.queue_depth == {"compile": 0}


# ownership and fencing -----------------------------------------------------------------------


async def test_lease_belongs_to_the_credential_that_took_it(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1"), req("r2")], 100.0)
    lease = await store.lease("compile", "w1", 101.0, 10.0, holder="tok-a")
    assert lease is not None and lease.holder == "tok-a" and lease.worker_id == "w1"
    # the worker_id in a body proves nothing: another credential claiming to be "w1" is refused
    for intruder in ("tok-b", "w1"):
        with pytest.raises(LeaseNotYours) as err:
            await store.heartbeat(lease.lease_id, intruder, 102.0, 10.0)
        assert err.value.details == {"field": "lease_id"}
        with pytest.raises(LeaseNotYours):
            await store.complete(
                Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1", 0.0)), intruder, 102.0
            )
        with pytest.raises(LeaseNotYours):
            await store.release(lease.lease_id, intruder, 102.0)
    assert await store.heartbeat(lease.lease_id, "tok-a", 103.0, 10.0) == pytest.approx(113.0)
    out = await store.complete(
        Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1", 0.5)), "tok-a", 104.0
    )
    assert out.request.result is not None and out.request.result.score == 0.5
    assert [s.worker for s in out.request.stages] == ["w1"]  # the display name is kept
    other = await store.lease("compile", "w2", 105.0, 10.0, holder="tok-b")
    assert other is not None
    with pytest.raises(LeaseNotYours):
        await store.release(other.lease_id, "tok-a", 106.0)
    assert await store.release(other.lease_id, "tok-b", 106.0) == "compile"


async def test_late_holder_is_fenced_off_before_and_after_the_requeue(store: QueueStore) -> None:
    await register(store, size=1)
    await store.submit([req("r1")], 100.0)
    old = await store.lease("compile", "old", 101.0, 6.0, holder="tok-old")
    assert old is not None
    # past the deadline, the reaper has not run yet: the old holder can neither extend nor finish
    with pytest.raises(LeaseExpired):
        await store.heartbeat(old.lease_id, "tok-old", 108.0, 6.0)
    with pytest.raises(LeaseExpired):
        await store.complete(
            Completion(lease_id=old.lease_id, run_s=7.0, result=ok("r1", 0.0)), "tok-old", 108.0
        )
    assert await store.requeue_expired(108.5, max_attempts=3) == [("r1", "compile")]
    new = await store.lease("compile", "new", 109.0, 6.0, holder="tok-new")
    assert new is not None and new.request_id == "r1" and new.attempt == 2
    # after the requeue the old lease no longer exists, while the new one runs and after it ended
    for at in (110.0, 112.0):
        with pytest.raises(UnknownLease):
            await store.complete(
                Completion(lease_id=old.lease_id, run_s=9.0, result=ok("r1", 0.0)), "tok-old", at
            )
        with pytest.raises(UnknownLease):
            await store.heartbeat(old.lease_id, "tok-old", at, 6.0)
        if at == 110.0:
            await store.complete(
                Completion(lease_id=new.lease_id, run_s=2.0, result=ok("r1", 1.0)), "tok-new", 111.0
            )
    rec = await store.get_request("t", "r1")
    assert rec is not None and rec.result is not None
    assert (rec.result.score, [s.worker for s in rec.result.stages]) == (1.0, ["new"])
    assert [(r.request_id, r.score) for r in await store.batch_results("t", "b")] == [("r1", 1.0)]
    batch = await store.get_batch("t", "b")
    assert batch is not None and batch.done == 1 and batch.complete


async def test_a_new_task_takes_its_prior_from_recent_batches_of_its_type(store: QueueStore) -> None:
    # a busy tenant's batch of synthetic requests: arrivals 1 s and 2 s after registration,
    # runs of 3 s and 4 s, so its span T = max(1 + 3, 2 + 4) = 6 s (Eq. 1-2)
    await register(store, batch="b", size=2, task="busy", now=100.0)
    await store.submit([req("r1", task="busy")], 101.0)
    await store.submit([req("r2", task="busy")], 102.0)
    for rid, start, run_s in (("r1", 101.0, 3.0), ("r2", 102.0, 4.0)):
        lease = await store.lease("compile", "w", start, 30.0)
        assert lease is not None and lease.request_id == rid
        await store.complete(
            Completion(lease_id=lease.lease_id, run_s=run_s, result=ok(rid)), "w", start + run_s
        )
    busy = await store.get_batch("busy", "b")
    assert busy is not None and busy.complete and busy.earliest_completion == pytest.approx(106.0)
    # a new task of the same type is estimated like it, not at the 600 s default
    fresh = await register(store, batch="b", task="fresh", now=200.0, reward_type="synthetic")
    assert fresh.estimated_completion == pytest.approx(206.0)
    # ...and the busy task keeps its own history
    again = await register(store, batch="b2", task="busy", now=300.0)
    assert again.estimated_completion == pytest.approx(306.0)
    # an hour later the sample is too old to say anything: the default again
    late = await register(store, batch="b", task="late", now=106.0 + 3601.0, reward_type="synthetic")
    assert late.estimated_completion == pytest.approx(106.0 + 3601.0 + SPAN)


# lease bundles -------------------------------------------------------------------------------


def final(lease_id: str, rid: str, score: float = 1.0, run_s: float = 1.0) -> Completion:
    return Completion(lease_id=lease_id, run_s=run_s, result=ok(rid, score), outcome="final")


async def test_bundle_takes_the_top_k_in_queue_order(store: QueueStore) -> None:
    # EBF: the batch with the earlier estimated completion first, FCFS within each batch
    await register(store, batch="late", size=3, now=100.0, rollout_started_at=200.0)
    await register(store, batch="early", size=3, now=100.0)
    await store.submit([req("l1", batch="late"), req("l2", batch="late"), req("e1", batch="early")], 101.0)
    await store.submit([req("e2", batch="early"), req("e3", batch="early")], 102.0)
    assert await store.lease_many("compile", "w", 103.0, 10.0, 0) == []
    got = await store.lease_many("compile", "w", 103.0, 10.0, 4, holder="tok")
    assert [x.request_id for x in got] == ["e1", "e2", "e3", "l1"]
    assert len({x.lease_id for x in got}) == 4 and {x.holder for x in got} == {"tok"}
    assert all(x.deadline == 113.0 and x.attempt == 1 and x.stage == "compile" for x in got)
    rest = await store.lease_many("compile", "w", 103.0, 10.0, 10)
    assert [x.request_id for x in rest] == ["l2"]  # fewer than k left: what there is
    assert await store.lease_many("compile", "w", 103.0, 10.0, 10) == []
    snap = await store.snapshot(104.0)
    assert snap.running == {"compile": 5}


async def test_bundle_heartbeat_answers_per_lease(store: QueueStore) -> None:
    await register(store, size=3)
    await store.submit([req("r1"), req("r2"), req("r3")], 100.0)
    mine = await store.lease_many("compile", "w", 101.0, 10.0, 2, holder="tok-a")
    other = await store.lease("compile", "w", 101.0, 10.0, holder="tok-b")
    assert other is not None
    out = await store.heartbeat_many(
        [mine[0].lease_id, "nope", other.lease_id, mine[1].lease_id], "tok-a", 105.0, 10.0
    )
    assert out[0] == pytest.approx(115.0) and out[3] == pytest.approx(115.0)
    assert isinstance(out[1], UnknownLease) and isinstance(out[2], LeaseNotYours)
    late = await store.heartbeat_many([mine[0].lease_id], "tok-a", 116.0, 10.0)
    assert isinstance(late[0], LeaseExpired)


async def test_bundle_completion_is_per_request_never_all_or_nothing(store: QueueStore) -> None:
    await register(store, size=4)
    await store.submit([req("r1"), req("r2"), req("r3"), req("r4")], 100.0)
    a = await store.lease_many("compile", "wa", 101.0, 10.0, 3, holder="tok-a")
    b = await store.lease("compile", "wb", 101.0, 10.0, holder="tok-b")
    assert [x.request_id for x in a] == ["r1", "r2", "r3"] and b is not None
    items = [
        Completion(lease_id=a[0].lease_id, run_s=2.0, artifacts={"bin": "QQ=="}, outcome="next"),
        final(a[1].lease_id, "r2", 0.5),
        final(b.lease_id, "r4", 0.0),  # another holder's lease inside the bundle
        final("nope", "r9"),
        final(a[1].lease_id, "r2", 0.0),  # the same lease twice: it finished just before
        final(a[2].lease_id, "r3", 0.25),
    ]
    out = await store.complete_many(items, "tok-a", 103.0)
    assert [type(o).__name__ for o in out] == [
        "CompleteOutcome", "CompleteOutcome", "LeaseNotYours", "UnknownLease", "UnknownLease", "CompleteOutcome",
    ]  # fmt: skip
    moved, r2, r3 = (o for o in out if isinstance(o, CompleteOutcome))
    assert moved.request.stage == "execute" and moved.request.artifacts == {"bin": "QQ=="}
    assert [(s.name, s.worker, s.run_s) for s in moved.request.stages] == [("compile", "wa", 2.0)]
    assert r2.request.result is not None and r2.request.result.score == 0.5
    assert r3.request.result is not None and r3.request.result.score == 0.25 and not r3.batch_completed
    err = out[2]
    assert isinstance(err, StoreError) and err.details == {"field": "lease_id"}
    # the refused lease is untouched: its own holder finishes it and the batch is not done yet
    done = await store.complete(
        Completion(lease_id=b.lease_id, run_s=1.0, result=ok("r4", 1.0)), "tok-b", 104.0
    )
    assert not done.batch_completed
    x = await store.lease_many("execute", "wx", 105.0, 10.0, 8)
    assert [y.request_id for y in x] == ["r1"] and x[0].artifacts == {"bin": "QQ=="}
    (last,) = await store.complete_many([final(x[0].lease_id, "r1", 1.0)], "wx", 106.0)
    assert isinstance(last, CompleteOutcome) and last.batch_completed
    assert [(r.request_id, r.score) for r in await store.batch_results("t", "b")] == [
        ("r1", 1.0), ("r2", 0.5), ("r3", 0.25), ("r4", 1.0),
    ]  # fmt: skip


async def test_bundle_of_a_killed_worker_expires_nothing_lost_nothing_twice(store: QueueStore) -> None:
    await register(store, size=4)
    await store.submit([req("r1"), req("r2"), req("r3"), req("r4")], 100.0)
    old = await store.lease_many("compile", "old", 101.0, 6.0, 3, holder="tok-old")
    # the worker reported the first item of its bundle, then was killed
    (first,) = await store.complete_many([final(old[0].lease_id, "r1", 0.1)], "tok-old", 102.0)
    assert isinstance(first, CompleteOutcome)
    assert sorted(await store.requeue_expired(108.0, max_attempts=3)) == [
        ("r2", "compile"),
        ("r3", "compile"),
    ]
    # back at their places, ahead of r4 (FCFS within the batch), attempt 2
    new = await store.lease_many("compile", "new", 109.0, 6.0, 8, holder="tok-new")
    assert [(x.request_id, x.attempt) for x in new] == [("r2", 2), ("r3", 2), ("r4", 1)]
    # the old worker comes back and reports the rest of its bundle: refused, item by item
    late = await store.complete_many([final(x.lease_id, x.request_id, 0.0) for x in old], "tok-old", 110.0)
    assert all(isinstance(o, UnknownLease) for o in late)
    out = await store.complete_many([final(x.lease_id, x.request_id, 0.9) for x in new], "tok-new", 111.0)
    assert all(isinstance(o, CompleteOutcome) for o in out)
    results = await store.batch_results("t", "b")
    assert [(r.request_id, r.score) for r in results] == [("r1", 0.1), ("r2", 0.9), ("r3", 0.9), ("r4", 0.9)]
    assert [[s.worker for s in r.stages] for r in results] == [["old"], ["new"], ["new"], ["new"]]
    batch = await store.get_batch("t", "b")
    assert batch is not None and batch.done == 4 and batch.complete


async def test_bundle_max_attempts_count_per_request(store: QueueStore) -> None:
    await register(store, size=2)
    await store.submit([req("r1"), req("r2")], 100.0)
    first = await store.lease_many("compile", "w", 101.0, 5.0, 2)
    # r1 is released (a draining worker gives it back: no attempt), r2 expires
    assert await store.release(first[0].lease_id, "w", 102.0) == "compile"
    assert await store.requeue_expired(107.0, max_attempts=2) == [("r2", "compile")]
    second = await store.lease_many("compile", "w", 108.0, 5.0, 2)
    assert [(x.request_id, x.attempt) for x in second] == [("r1", 1), ("r2", 2)]
    assert sorted(await store.requeue_expired(114.0, max_attempts=2)) == [
        ("r1", "compile"),
        ("r2", "compile"),
    ]
    # r2 used its two attempts and ended; r1 only one and is queued again
    r2 = await store.get_request("t", "r2")
    assert r2 is not None and r2.result is not None and r2.result.status is Status.INTERNAL_ERROR
    assert [x.request_id for x in await store.lease_many("compile", "w", 115.0, 5.0, 2)] == ["r1"]


# usage per tenant (quotas) -----------------------------------------------------------------------

TTL = StoreSettings.model_validate({}).result_ttl_s


def alice(rid: str, batch: str = "b") -> NewRequest:
    return req(rid, task="alice/t", batch=batch, tenant="alice")


async def test_tenant_usage_counts_unfinished_requests_and_kept_result_bytes(store: QueueStore) -> None:
    await store.register_batch(BatchInfo(tenant="alice", task="alice/t", batch_id="b", size=3), 100.0)
    await store.register_batch(BatchInfo(tenant="bob", task="bob/t", batch_id="b", size=1), 100.0)
    await store.submit([alice("r1"), alice("r2"), alice("r3")], 101.0)
    await store.submit([alice("r1")], 101.5)  # a duplicate counts nothing
    for exact in (False, True):
        u = await store.tenant_usage("alice", 102.0, exact=exact)
        assert (u.queued, u.result_bytes, u.next_expiry) == (3, 0, None)
    assert (await store.tenant_usage("bob", 102.0)).queued == 0  # registered, nothing submitted
    await store.submit([req("x", task="bob/t", tenant="bob", stage="other")], 102.0)
    assert (await store.tenant_usage("bob", 102.0)).queued == 1
    assert (await store.tenant_usage("nobody", 102.0)).queued == 0

    one = await store.lease("compile", "w", 103.0, 30.0)
    assert one is not None
    await store.complete(
        Completion(lease_id=one.lease_id, run_s=1.0, result=ok(one.request_id, 0.5)), "w", 104.0
    )
    u = await store.tenant_usage("alice", 104.0)
    sizes = [len(r.model_dump_json()) for r in await store.batch_results("alice/t", "b")]
    assert (u.queued, u.result_bytes, u.next_expiry) == (2, sum(sizes), None)  # batch still running

    two = await store.lease_many("compile", "w", 105.0, 30.0, k=2)
    assert len(two) == 2
    items = [Completion(lease_id=x.lease_id, run_s=1.0, result=ok(x.request_id)) for x in two]
    await store.complete_many(items, "w", 106.0)
    sizes = [len(r.model_dump_json()) for r in await store.batch_results("alice/t", "b")]
    for exact in (False, True):
        u = await store.tenant_usage("alice", 107.0, exact=exact)
        assert (u.queued, u.result_bytes) == (0, sum(sizes))
        assert u.next_expiry == pytest.approx(106.0 + TTL)  # kept result_ttl_s after completion
    assert (await store.tenant_usage("bob", 107.0)).result_bytes == 0  # tenants never mix
    # past the batch's expiry its results stop counting
    gone = await store.tenant_usage("alice", 106.0 + TTL + 1.0)
    assert (gone.queued, gone.result_bytes, gone.next_expiry) == (0, 0, None)


async def test_tenant_usage_counts_a_request_ended_by_lease_expiry(store: QueueStore) -> None:
    await store.register_batch(BatchInfo(tenant="alice", task="alice/t", batch_id="b", size=2), 100.0)
    await store.submit([alice("r1"), alice("r2")], 101.0)
    first = await store.lease("compile", "w", 102.0, 3.0)
    assert first is not None
    assert await store.requeue_expired(110.0, max_attempts=1) == [(first.request_id, "compile")]
    u = await store.tenant_usage("alice", 110.0)
    [ended] = await store.batch_results("alice/t", "b")
    assert ended.status is Status.INTERNAL_ERROR
    assert (u.queued, u.result_bytes) == (1, len(ended.model_dump_json()))
    # the last request of the batch ended by the reaper: the batch completes there
    second = await store.lease("compile", "w", 111.0, 3.0)
    assert second is not None
    assert await store.requeue_expired(120.0, max_attempts=1) == [(second.request_id, "compile")]
    u = await store.tenant_usage("alice", 120.0, exact=True)
    sizes = [len(r.model_dump_json()) for r in await store.batch_results("alice/t", "b")]
    assert (u.queued, u.result_bytes, u.next_expiry) == (0, sum(sizes), pytest.approx(120.0 + TTL))


async def test_tenant_usage_exact_repairs_counters_a_crash_left_off(store: QueueStore) -> None:
    """A process that dies between a script and its counter update leaves the counters off; the
    exact count reads the batch records instead and repairs them (memory counts exactly always)."""
    await store.register_batch(BatchInfo(tenant="alice", task="alice/t", batch_id="b", size=2), 100.0)
    await store.submit([alice("r1"), alice("r2")], 101.0)
    if isinstance(store, RedisStore):  # as if five completions' decrements had been lost
        await store.topology.client.hincrby(
            store.keys.usage_queued("alice"), store.keys.batch("alice/t", "b"), 5
        )
        await store.topology.client.hincrby(store.keys.usage_totals("alice"), "queued", 5)
        await store.topology.client.hincrby(store.keys.usage_totals("alice"), "bytes", 999)
        assert (await store.tenant_usage("alice", 102.0)).result_bytes == 999
        assert (await store.tenant_usage("alice", 102.0)).queued == 7
    for exact in (True, False):  # repaired for the fast path too
        u = await store.tenant_usage("alice", 102.0, exact=exact)
        assert (u.queued, u.result_bytes) == (2, 0)


async def test_tenant_usage_counts_each_task_of_a_bulk_call(store: QueueStore) -> None:
    """One request id in two tasks of a call, a duplicate in one and new in the other: the new one
    is counted under its own batch, so finishing the other batch leaves it counted."""
    await store.register_batch(BatchInfo(tenant="alice", task="alice/t", batch_id="b", size=1), 100.0)
    await store.register_batch(BatchInfo(tenant="alice", task="alice/u", batch_id="b", size=1), 100.0)
    await store.submit([alice("r1")], 101.0)
    out = await store.submit([alice("r1"), req("r1", task="alice/u", tenant="alice", stage="other")], 102.0)
    assert out.accepted == ["r1"] and out.duplicates == ["r1"]
    assert (await store.tenant_usage("alice", 103.0)).queued == 2
    lease = await store.lease("compile", "w", 103.0, 30.0)
    assert lease is not None and lease.task == "alice/t"
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=ok("r1")), "w", 104.0)
    for exact in (False, True):
        assert (await store.tenant_usage("alice", 105.0, exact=exact)).queued == 1
