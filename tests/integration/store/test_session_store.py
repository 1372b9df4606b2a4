"""One conformance suite for the session stores: memory, Redis and Redis Cluster behave alike.

Affinity (a session's calls reach only the worker that took its create), fencing (only the
holder completes, once), idempotent submission, answers for ended sessions (never a fresh one),
quotas, and the sweep (lost workers, overdue calls, idle and over-age sessions, creates no
worker took). Times are passed in; the one wake-up test waits well under a second.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from distrs.config import StoreSettings
from distrs.core.sessions import (
    EndReason,
    Language,
    OpKind,
    OpState,
    SessionOp,
    SessionRecord,
    SessionState,
    WorkerView,
)
from distrs.store.sessions import create_session_store
from distrs.store.sessions.base import (
    OpConflict,
    OpDone,
    SessionEnded,
    SessionNotFound,
    SessionQuotaExceeded,
    SessionStore,
)
from distrs.store.sessions.memory import MemorySessionStore
from distrs.store.sessions.redis import RedisSessionStore

GRACE = 10.0
TTL = 15.0
MakeStore = Callable[[], Awaitable[SessionStore]]


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ]
)
def backend(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    if request.param == "memory":
        return None
    if request.param == "cluster":
        return "cluster", str(request.getfixturevalue("redis_cluster").url)
    return "standalone", str(request.getfixturevalue("redis_server").url)


@pytest.fixture
async def store(backend: tuple[str, str] | None) -> AsyncIterator[SessionStore]:
    if backend is None:
        s: SessionStore = MemorySessionStore()
    else:
        mode, url = backend
        settings = StoreSettings.model_validate({"redis_url": url, "redis_mode": mode})
        s = create_session_store(settings, namespace=f"t{uuid.uuid4().hex[:8]}")
        assert isinstance(s, RedisSessionStore)
    await s.start()
    yield s
    await s.close()


def new_session(
    sid: str, now: float = 100.0, tenant: str = "a", idle: float = 60.0
) -> tuple[SessionRecord, SessionOp]:
    rec = SessionRecord(
        session_id=sid,
        tenant=tenant,
        task=f"{tenant}/t",
        language=Language.PYTHON,
        created_at=now,
        last_used_at=now,
        idle_timeout_s=idle,
        max_lifetime_s=3600.0,
    )
    op = SessionOp(
        op_id=f"{sid}.create", session_id=sid, kind=OpKind.CREATE, body={"files": {}}, created_at=now
    )
    return rec, op


def worker(wid: str, now: float, capacity: int = 4, draining: bool = False) -> WorkerView:
    return WorkerView(worker_id=wid, holder=f"h-{wid}", capacity=capacity, draining=draining, seen_at=now)


def exec_op(sid: str, n: int, now: float, code: str = "1") -> SessionOp:
    return SessionOp(
        op_id=f"{sid}.e{n}",
        session_id=sid,
        kind=OpKind.EXEC,
        body={"code": code, "timeout_s": 5},
        created_at=now,
    )


async def opened(store: SessionStore, sid: str, wid: str = "w1", now: float = 100.0) -> None:
    rec, op = new_session(sid, now)
    await store.create(rec, op, now, None)
    got = await store.poll(worker(wid, now), now, 10, GRACE)
    assert [o.op_id for o in got] == [op.op_id]
    [done] = await store.complete(f"h-{wid}", [OpDone(op_id=op.op_id, result={"ok": True})], now)
    assert done.error is None and not done.close


async def test_a_sessions_calls_reach_only_the_worker_that_took_it(store: SessionStore) -> None:
    rec, op = new_session("s1")
    await store.create(rec, op, 100.0, None)
    assert (
        await store.poll(worker("w1", 100.0, draining=True), 100.0, 10, GRACE) == []
    )  # draining: no creates
    taken = await store.poll(worker("w1", 100.0), 100.0, 10, GRACE)
    assert [o.op_id for o in taken] == ["s1.create"] and taken[0].state is OpState.RUNNING
    assert taken[0].deadline == 100.0 + GRACE
    assert await store.poll(worker("w2", 100.0), 100.0, 10, GRACE) == []  # taken once
    await store.complete("h-w1", [OpDone(op_id="s1.create", result={})], 101.0)
    got = await store.get("s1")
    assert got is not None and got.state is SessionState.OPEN and got.worker_id == "w1"
    for n in range(3):
        await store.submit(exec_op("s1", n, 102.0), 102.0)
    assert await store.poll(worker("w2", 103.0), 103.0, 10, GRACE) == []
    taken = await store.poll(worker("w1", 103.0), 103.0, 2, GRACE)
    assert [o.op_id for o in taken] == ["s1.e0", "s1.e1"]  # in order, at most max_ops
    assert taken[0].deadline == 103.0 + 5 + GRACE
    assert [o.op_id for o in await store.poll(worker("w1", 103.0), 103.0, 10, GRACE)] == ["s1.e2"]


async def test_only_the_holder_completes_and_only_once(store: SessionStore) -> None:
    await opened(store, "s1")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    await store.poll(worker("w1", 101.0), 101.0, 10, GRACE)
    [refused] = await store.complete("h-other", [OpDone(op_id="s1.e1", result={"stdout": "x"})], 102.0)
    assert refused.error == "op_not_yours"
    first, unknown = await store.complete(
        "h-w1", [OpDone(op_id="s1.e1", result={"stdout": "1"}), OpDone(op_id="s1.nope", result={})], 102.0
    )
    assert first.error is None and unknown.error == "unknown_op"  # one refusal leaves the other alone
    [again] = await store.complete("h-w1", [OpDone(op_id="s1.e1", result={"stdout": "2"})], 103.0)
    assert again.error == "unknown_op"
    op = await store.get_op("s1.e1")
    assert op is not None and op.done and op.result == {"stdout": "1"}
    rec = await store.get("s1")
    assert rec is not None and rec.execs == 1 and rec.busy == 0 and rec.last_used_at == 102.0


async def test_submission_is_idempotent_per_op_id(store: SessionStore) -> None:
    await opened(store, "s1")
    first = await store.submit(exec_op("s1", 1, 101.0, "x = 1"), 101.0)
    again = await store.submit(exec_op("s1", 1, 105.0, "x = 1"), 105.0)
    assert again.op_id == first.op_id and again.state is OpState.QUEUED
    assert len(await store.poll(worker("w1", 106.0), 106.0, 10, GRACE)) == 1  # queued once
    with pytest.raises(OpConflict):
        await store.submit(exec_op("s1", 1, 107.0, "x = 2"), 107.0)
    await store.complete("h-w1", [OpDone(op_id="s1.e1", result={"value": None})], 108.0)
    done = await store.submit(exec_op("s1", 1, 109.0, "x = 1"), 109.0)
    assert done.done and done.result == {"value": None}  # the answer, not a second run
    rec = await store.get("s1")
    assert rec is not None and rec.busy == 0


async def test_ended_sessions_answer_their_reason_and_queued_calls_too(store: SessionStore) -> None:
    await opened(store, "s1")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    rec = await store.end("s1", EndReason.DELETED, 102.0)
    assert rec is not None and rec.state is SessionState.CLOSED and rec.end_reason is EndReason.DELETED
    queued = await store.get_op("s1.e1")
    assert queued is not None and queued.done and queued.error is not None
    assert queued.error["code"] == "session_deleted" and queued.error["status"] == 404
    with pytest.raises(SessionEnded) as e:
        await store.submit(exec_op("s1", 2, 103.0), 103.0)
    assert e.value.status == 404 and e.value.code == "session_deleted"
    again = await store.end("s1", EndReason.IDLE, 104.0)
    assert again is not None and again.end_reason is EndReason.DELETED  # ended once
    closes = await store.poll(worker("w1", 105.0), 105.0, 10, GRACE)
    assert [(o.kind, o.session_id) for o in closes] == [(OpKind.CLOSE, "s1")]  # its worker frees it
    with pytest.raises(SessionNotFound):
        await store.submit(exec_op("nope", 1, 103.0), 103.0)


async def test_a_lost_worker_ends_its_sessions_lost_and_answers_calls_in_flight(store: SessionStore) -> None:
    await opened(store, "s1", "w1")
    await opened(store, "s2", "w2")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    await store.poll(worker("w1", 101.0), 101.0, 10, GRACE)  # s1.e1 running on w1
    await store.submit(exec_op("s1", 2, 102.0), 102.0)  # queued behind it
    await store.poll(worker("w2", 110.0), 110.0, 10, GRACE)
    report = await store.sweep(101.0 + TTL + 1, TTL, 60.0, 3600.0)
    assert report.workers_lost == ["w1"] and report.ended == {"lost": 1}
    for op_id in ("s1.e1", "s1.e2"):
        op = await store.get_op(op_id)
        assert op is not None and op.done and op.error is not None and op.error["code"] == "session_lost"
    with pytest.raises(SessionEnded) as e:
        await store.submit(exec_op("s1", 3, 120.0), 120.0)
    assert (e.value.status, e.value.code) == (410, "session_lost")
    s2 = await store.get("s2")
    assert s2 is not None and s2.state is SessionState.OPEN  # w2 still polls


async def test_an_overdue_call_ends_its_session_and_the_worker_is_told_to_close(store: SessionStore) -> None:
    await opened(store, "s1")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    [op] = await store.poll(worker("w1", 101.0), 101.0, 10, GRACE)
    assert op.deadline is not None
    late = op.deadline + 1
    await store.poll(worker("w1", late), late, 0, GRACE)  # the worker still polls
    report = await store.sweep(late, TTL, 60.0, 3600.0)
    assert report.ended == {"lost": 1} and report.workers_lost == []
    got = await store.get_op("s1.e1")
    assert got is not None and got.error is not None and got.error["code"] == "session_lost"
    kinds = [o.kind for o in await store.poll(worker("w1", late), late, 10, GRACE)]
    assert kinds == [OpKind.CLOSE]


async def test_idle_and_over_age_sessions_expire_but_not_while_in_use(store: SessionStore) -> None:
    await opened(store, "idle")
    await opened(store, "busy")
    await store.submit(exec_op("busy", 1, 100.0), 100.0)
    await store.poll(worker("w1", 170.0), 170.0, 10, GRACE)
    report = await store.sweep(170.0, 1000.0, 60.0, 3600.0)
    assert report.ended == {"idle_timeout": 1}
    idle = await store.get("idle")
    assert idle is not None and idle.end_reason is EndReason.IDLE
    busy = await store.get("busy")
    assert busy is not None and busy.state is SessionState.OPEN
    with pytest.raises(SessionEnded) as e:
        await store.submit(exec_op("idle", 1, 171.0), 171.0)
    assert (e.value.status, e.value.code) == (410, "session_expired")


async def test_a_create_no_worker_takes_times_out(store: SessionStore) -> None:
    rec, op = new_session("s1", 100.0)
    await store.create(rec, op, 100.0, None)
    report = await store.sweep(200.0, TTL, 60.0, 3600.0)
    assert report.ended == {"create_timeout": 1}
    got = await store.get_op("s1.create")
    assert got is not None and got.done and got.error is not None
    assert await store.poll(worker("w1", 201.0), 201.0, 10, GRACE) == []


async def test_a_failed_create_ends_the_session_with_its_reason(store: SessionStore) -> None:
    rec, op = new_session("s1")
    await store.create(rec, op, 100.0, None)
    await store.poll(worker("w1", 100.0), 100.0, 10, GRACE)
    await store.complete("h-w1", [OpDone(op_id="s1.create", error={"message": "no jail"})], 101.0)
    got = await store.get("s1")
    assert got is not None and got.end_reason is EndReason.CREATE_FAILED and got.detail == "no jail"


async def test_a_session_given_up_while_its_create_ran_is_closed_by_its_worker(store: SessionStore) -> None:
    rec, op = new_session("s1")
    await store.create(rec, op, 100.0, None)
    await store.poll(worker("w1", 100.0), 100.0, 10, GRACE)
    await store.end("s1", EndReason.CREATE_TIMEOUT, 101.0)
    [done] = await store.complete("h-w1", [OpDone(op_id="s1.create", result={})], 102.0)
    assert done.close


async def test_quota_counts_open_sessions_per_tenant(store: SessionStore) -> None:
    for sid in ("s1", "s2"):
        rec, op = new_session(sid)
        await store.create(rec, op, 100.0, 2)
    rec, op = new_session("s3")
    with pytest.raises(SessionQuotaExceeded):
        await store.create(rec, op, 100.0, 2)
    other, other_op = new_session("b1", tenant="b")
    await store.create(other, other_op, 100.0, 2)  # another tenant's quota is its own
    await store.end("s1", EndReason.DELETED, 101.0)
    assert await store.tenant_open("a") == 1
    await store.create(rec, op, 102.0, 2)  # room again


async def test_a_worker_takes_no_more_creates_than_its_room(store: SessionStore) -> None:
    for n in range(3):
        rec, op = new_session(f"s{n}")
        await store.create(rec, op, 100.0, None)
    assert len(await store.poll(worker("w1", 100.0, capacity=2), 100.0, 10, GRACE)) == 2
    assert await store.poll(worker("w1", 100.0, capacity=2), 100.0, 10, GRACE) == []
    assert len(await store.poll(worker("w2", 100.0, capacity=2), 100.0, 10, GRACE)) == 1
    stats = await store.stats(100.0)
    assert stats.opening == 3 and stats.creates_queued == 0


async def test_stats_count_open_sessions_and_calls(store: SessionStore) -> None:
    await opened(store, "s1")
    await opened(store, "s2")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    await store.submit(exec_op("s1", 2, 101.0), 101.0)
    await store.poll(worker("w1", 101.0), 101.0, 1, GRACE)
    s = await store.stats(101.0)
    assert (s.open, s.ops_running, s.ops_queued, s.busy_sessions) == (2, 1, 1, 1)
    assert s.open_by_worker == {"w1": 2} and [w.worker_id for w in s.workers] == ["w1"]


async def test_ended_sessions_are_forgotten_after_their_ttl(store: SessionStore) -> None:
    await opened(store, "s1")
    await store.end("s1", EndReason.DELETED, 101.0)
    await store.sweep(102.0, 1e9, 60.0, 10.0)
    assert await store.get("s1") is not None
    await store.sweep(120.0, 1e9, 60.0, 10.0)
    assert await store.get("s1") is None


async def test_waiters_wake_when_a_call_is_answered_and_when_work_arrives(store: SessionStore) -> None:
    await opened(store, "s1")
    await store.submit(exec_op("s1", 1, 101.0), 101.0)
    await store.poll(worker("w1", 101.0), 101.0, 10, GRACE)
    waiting = asyncio.create_task(store.wait_op("s1.e1", 5.0))
    await asyncio.sleep(0.05)
    await store.complete("h-w1", [OpDone(op_id="s1.e1", result={})], 102.0)
    await asyncio.wait_for(waiting, 2.0)
    polling = asyncio.create_task(store.wait_for_ops("w1", 5.0))
    await asyncio.sleep(0.05)
    await store.submit(exec_op("s1", 2, 103.0), 103.0)
    await asyncio.wait_for(polling, 2.0)
