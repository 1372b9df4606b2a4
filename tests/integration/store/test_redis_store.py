"""Redis-only store behaviour: durability across redis-server restarts, concurrency, key hygiene.

The server runs with ``appendonly yes`` and ``appendfsync always`` (tests/fixtures/redis_server.py),
so every acknowledged write is on disk before the reply: killing redis-server with SIGKILL must not
lose any of it. docs/store.md explains the production choice between ``always`` and ``everysec``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
import redis.asyncio as aioredis

from distrs.config import StoreSettings
from distrs.core.model import BatchInfo, Completion, RequestState, Result, Status
from distrs.store.base import NewRequest
from distrs.store.errors import LeaseNotYours, Unavailable, UnknownLease
from distrs.store.redis import RedisStore
from distrs.store.redis.scripts import LEASE, LeaseArgs, LeaseKeys, NewLease
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.redis


def _settings(url: str) -> StoreSettings:
    return StoreSettings.model_validate({"redis_url": url, "result_ttl_s": 3600})


async def _store(url: str, ns: str) -> RedisStore:
    s = RedisStore.from_url(url, _settings(url), namespace=ns)
    await s.start()
    return s


def _req(rid: str, batch: str = "b") -> NewRequest:
    return NewRequest(
        task="t",
        batch_id=batch,
        request_id=rid,
        reward_type="synthetic",
        route=["compile", "execute"],
        payload={"i": rid},
    )


async def _retry(coro_fn, attempts: int = 50):  # type: ignore[no-untyped-def]
    """Call until Redis answers again (a restarted server needs a moment)."""
    for _ in range(attempts):
        try:
            return await coro_fn()
        except Unavailable:
            await asyncio.sleep(0.1)
    return await coro_fn()


@pytest.mark.parametrize("hard", [True, False], ids=["sigkill", "shutdown"])
async def test_restart_mid_batch_loses_nothing_acknowledged(
    fresh_redis_server: RedisServer, hard: bool
) -> None:
    srv = fresh_redis_server
    store = await _store(srv.url, "dur")
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=20), 100.0)
    out = await store.submit([_req(f"r{i:02d}") for i in range(20)], 101.0)
    assert len(out.accepted) == 20
    # r00..r04 finished, r05..r09 moved on to execute with an artifact, r10..r11 leased (in flight)
    for i in range(12):
        lease = await store.lease("compile", "w", 102.0, 10.0)
        assert lease is not None and lease.request_id == f"r{i:02d}"
        if i < 5:
            res = Result(request_id=lease.request_id, status=Status.OK, score=i / 10)
            await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=res), "w", 103.0)
        elif i < 10:
            await store.complete(
                Completion(lease_id=lease.lease_id, outcome="next", run_s=1.0, artifacts={"bin": f"B{i}"}),
                "w",
                103.0,
            )

    srv.restart(hard=hard)

    # the same store object reconnects (and reloads its scripts) by itself
    results = await _retry(lambda: store.batch_results("t", "b"))
    assert [(r.request_id, r.score) for r in results] == [
        (f"r{i:02d}", pytest.approx(i / 10)) for i in range(5)
    ]
    batch = await store.get_batch("t", "b")
    assert batch is not None and batch.submitted == 20 and batch.done == 5
    dup = await store.submit([_req("r00"), _req("r19")], 104.0)
    assert dup.duplicates == ["r00", "r19"]  # idempotency survives the restart
    # in-flight leases are still held and expire into the queue again
    assert sorted(await store.requeue_expired(113.0, max_attempts=3)) == [
        ("r10", "compile"),
        ("r11", "compile"),
    ]
    compile_ids = []
    while (lease := await store.lease("compile", "w2", 114.0, 30.0)) is not None:
        compile_ids.append(lease.request_id)
        res = Result(request_id=lease.request_id, status=Status.OK)
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=res), "w2", 115.0)
    assert compile_ids == ["r10", "r11"] + [f"r{i:02d}" for i in range(12, 20)]
    exec_ids = []
    while (lease := await store.lease("execute", "w3", 116.0, 30.0)) is not None:
        assert lease.artifacts == {"bin": f"B{int(lease.request_id[1:])}"}
        exec_ids.append(lease.request_id)
        res = Result(request_id=lease.request_id, status=Status.OK)
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=res), "w3", 117.0)
    assert exec_ids == [f"r{i:02d}" for i in range(5, 10)]
    final = await store.get_batch("t", "b")
    assert final is not None and final.complete and final.done == 20
    assert [r.request_id for r in await store.batch_results("t", "b")] == [f"r{i:02d}" for i in range(20)]
    assert len(await store.history("t")) == 1
    await store.close()


async def test_unavailable_while_redis_is_down(fresh_redis_server: RedisServer) -> None:
    srv = fresh_redis_server
    store = await _store(srv.url, "down")
    assert await store.ping()
    srv.kill()
    assert not await store.ping()
    with pytest.raises(Unavailable) as e:
        await store.register_batch(BatchInfo(task="t", batch_id="b", size=1), 100.0)
    assert e.value.status == 503
    srv.restart()
    await _retry(lambda: store.register_batch(BatchInfo(task="t", batch_id="b", size=1), 100.0))
    assert await store.ping()
    await store.close()


async def test_concurrent_leases_never_hand_out_a_request_twice(redis_server: RedisServer) -> None:
    ns = f"conc-{uuid.uuid4().hex[:8]}"
    # two store objects = two proxy processes sharing one Redis
    stores = [await _store(redis_server.url, ns) for _ in range(2)]
    n = 600
    await stores[0].register_batch(BatchInfo(task="t", batch_id="b", size=n), 100.0)
    await stores[0].submit([_req(f"r{i}") for i in range(n)], 101.0)
    got: list[str] = []

    async def worker(k: int) -> None:
        store = stores[k % 2]
        while (lease := await store.lease("compile", f"w{k}", 102.0, 30.0)) is not None:
            got.append(lease.request_id)
            await asyncio.sleep(0)

    await asyncio.gather(*(worker(k) for k in range(64)))
    counts = Counter(got)
    assert len(got) == n and set(counts.values()) == {1}
    assert sorted(counts) == sorted(f"r{i}" for i in range(n))
    for s in stores:
        await s.flush_namespace()
        await s.close()


async def test_wake_up_crosses_processes(redis_server: RedisServer) -> None:
    ns = f"wake-{uuid.uuid4().hex[:8]}"
    a, b = await _store(redis_server.url, ns), await _store(redis_server.url, ns)
    await a.register_batch(BatchInfo(task="t", batch_id="b", size=1), 100.0)
    assert await b.lease("compile", "w", 100.0, 30.0) is None
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    waiter = asyncio.create_task(b.wait_for_work("compile", 5.0))
    await asyncio.sleep(0.05)
    await a.submit([_req("r1")], 101.0)
    await asyncio.wait_for(waiter, 3.0)
    assert loop.time() - t0 < 0.9
    for s in (a, b):
        await s.flush_namespace()
        await s.close()


async def test_a_completion_handled_while_the_batch_read_returns_is_not_missed(
    redis_server: RedisServer,
) -> None:
    """The batch completes after Redis answered the read, and its wake-up is handled before the
    reading coroutine resumes: the results long-poll's next wait must still return at once."""
    from distrs.store.redis.wake import completed_key

    ns = f"done-{uuid.uuid4().hex[:8]}"
    store = await _store(redis_server.url, ns)
    try:
        await store.register_batch(BatchInfo(task="t", batch_id="b", size=1), 100.0)
        call = store.topology.call

        async def read_then_wake(fn):  # type: ignore[no-untyped-def]
            out = await call(fn)
            store.wake.results.wake(completed_key(store.keys.batch("t", "b")))  # the listener ran first
            return out

        store.topology.call = read_then_wake  # type: ignore[method-assign]
        batch = await store.get_batch("t", "b")
        store.topology.call = call  # type: ignore[method-assign]
        assert batch is not None and not batch.complete
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await store.wait_batch("t", "b", 5.0, until_complete=True)
        assert loop.time() - t0 < 0.5  # not the 1 s re-check
    finally:
        await store.flush_namespace()
        await store.close()


async def test_keys_are_namespaced_and_finished_batches_expire(redis_server: RedisServer) -> None:
    ns = f"keys-{uuid.uuid4().hex[:8]}"
    store = await _store(redis_server.url, ns)
    await store.register_batch(BatchInfo(task="t:x", batch_id="b", size=2), 100.0)
    await store.submit([_req("r1", "b").model_copy(update={"task": "t:x"}),
                        _req("r2", "b").model_copy(update={"task": "t:x"})], 101.0)  # fmt: skip
    for _ in range(2):
        lease = await store.lease("compile", "w", 102.0, 30.0)
        assert lease is not None
        res = Result(request_id=lease.request_id, status=Status.OK)
        await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=res), "w", 103.0)
    raw = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    keys = [k async for k in raw.scan_iter(match="*", count=1000) if ns in k]
    assert keys and all(k.startswith("{" + ns + "}:") for k in keys)
    assert not any(":lease:" in k for k in keys)  # finished leases leave nothing behind
    k = store.keys
    for key in (k.batch("t:x", "b"), k.request("t:x", "r1"), k.batch_results("t:x", "b")):
        assert 0 < await raw.ttl(key) <= 3600
    for key in (k.owner("t:x"), k.history("t:x")):
        assert await raw.ttl(key) == -1  # ownership and history outlive the batch
    assert k.batch("t:x", "b") != k.batch("t", "x:b")
    rec = await store.get_request("t:x", "r1")
    assert rec is not None and rec.state is RequestState.DONE
    await raw.aclose()
    await store.flush_namespace()
    await store.close()


async def test_one_new_request_wakes_one_waiter(redis_server: RedisServer) -> None:
    """One request wakes one parked long-poll, not the herd. The waiters' own timeout (30 s) is
    far past anything here, so a waiter that returned was woken: no real-clock threshold."""
    ns = f"herd-{uuid.uuid4().hex[:8]}"
    store = await _store(redis_server.url, ns)
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 100.0)
    woke: list[int] = []

    async def waiter(i: int) -> None:
        await store.wait_for_work("compile", 30.0)
        woke.append(i)

    async def until(n: int) -> None:
        for _ in range(400):  # a cap (20 s) that keeps a broken build from hanging
            if len(woke) >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{len(woke)} of {n} waiters woke")

    waiters = [asyncio.create_task(waiter(i)) for i in range(10)]
    await asyncio.sleep(0.05)  # let them park
    await store.submit([_req("r1")], 101.0)  # one request: one idle long-poll is enough
    await until(1)
    await asyncio.sleep(0.2)  # a herd woken by it would have returned by now
    assert len(woke) == 1
    await store.submit([_req("r2"), _req("r3")], 102.0)
    await until(3)
    await asyncio.sleep(0.2)
    assert len(woke) == 3  # the other seven are still parked
    for t in waiters:
        t.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    await store.flush_namespace()
    await store.close()


async def test_wake_ups_resume_after_redis_restart(fresh_redis_server: RedisServer) -> None:
    srv = fresh_redis_server
    store = await _store(srv.url, "rewake")
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=100), 100.0)
    srv.restart(hard=True)
    await _retry(lambda: store.get_batch("t", "b"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    quick, i = 0, 0
    # The subscriber reconnects in the background (and then wakes every waiter once, since
    # messages may have been lost): two quick wake-ups in a row prove messages flow again.
    while quick < 2:
        i += 1
        waiter = asyncio.create_task(store.wait_for_work("compile", 5.0))
        await asyncio.sleep(0.05)
        t0 = loop.time()
        new = [_req(f"r{i}")]
        await _retry(lambda: store.submit(new, 101.0))  # noqa: B023 - awaited at once
        await asyncio.wait_for(waiter, 6.0)
        quick = quick + 1 if loop.time() - t0 < 0.5 else 0
        assert loop.time() < deadline, "wake-ups never resumed after the restart"
        await store.lease("compile", "w", 102.0, 30.0)
    await store.close()


async def test_pipelined_calls_keep_their_own_results_and_errors(redis_server: RedisServer) -> None:
    ns = f"pipe-{uuid.uuid4().hex[:8]}"
    store = await _store(redis_server.url, ns)
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=20), 100.0)
    await store.submit([_req(f"r{i}") for i in range(20)], 101.0)
    raw = aioredis.Redis.from_url(redis_server.url)
    await raw.script_flush()  # as after a restart: every script must be reloaded, even mid-pipeline
    await raw.aclose()
    # issued in one event-loop tick, so they travel as one pipeline
    leases = await asyncio.gather(*(store.lease("compile", f"w{i}", 102.0, 30.0) for i in range(20)))
    assert sorted(lease.request_id for lease in leases if lease) == sorted(f"r{i}" for i in range(20))
    calls = [store.heartbeat(lease.lease_id, lease.worker_id, 103.0, 30.0) for lease in leases if lease]
    calls.append(store.heartbeat("nope", "w0", 103.0, 30.0))
    calls.append(store.heartbeat(leases[0].lease_id, "intruder", 103.0, 30.0))  # type: ignore[union-attr]
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert out[:20] == [133.0] * 20
    assert isinstance(out[20], UnknownLease) and isinstance(out[21], LeaseNotYours)
    await store.flush_namespace()
    await store.close()


async def test_every_redis_failure_is_unavailable_never_a_crash(redis_server: RedisServer) -> None:
    store = RedisStore.from_url(redis_server.url, namespace=f"t-{uuid.uuid4().hex[:12]}")
    await store.start()
    try:
        # an error reply no script expects (an operator's key of the wrong type): 503, not 500
        await store.topology.client.set(store.keys.leases(), "not a sorted set")
        with pytest.raises(Unavailable):
            await store.requeue_expired(100.0, max_attempts=3)
        await store.topology.client.delete(store.keys.leases())

        # redis-py raises RuntimeError from an interrupted connection (health check or a read
        # still pending); the store's one wrapper for Redis calls maps it to 503 as well
        async def interrupted() -> None:
            raise RuntimeError("readuntil() called while another coroutine is already waiting")

        with pytest.raises(Unavailable):
            await store.topology.call(interrupted)
        assert await store.requeue_expired(100.0, max_attempts=3) == []
    finally:
        await store.flush_namespace()
        await store.close()


async def test_a_lease_script_run_twice_takes_one_request(redis_server: RedisServer) -> None:
    """A client that lost the reply sends the same lease script again (same lease ids): the
    second run answers the lease the first took, and the next request stays queued."""
    ns = f"replay-{uuid.uuid4().hex[:8]}"
    store = await _store(redis_server.url, ns)
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 100.0)
    await store.submit([_req(f"r{i}") for i in range(3)], 101.0)
    k = store.keys
    ids = ["replayed-1", "replayed-2"]
    keys = LeaseKeys(k.queue("compile"), k.leases())
    new = [NewLease(k.lease(i), i) for i in ids]
    args = LeaseArgs("102.0", "30.0", "w", "compile", "w")
    first = await store.topology.run(LEASE, keys, args, new)
    again = await store.topology.run(LEASE, keys, args, new)
    assert [row[0] for row in first] == ["r0", "r1"]
    assert again == first
    other = await store.topology.run(LEASE, keys, args._replace(holder="someone-else"), new)
    assert other == []  # another holder's ids are never answered with this lease
    nxt = await store.lease("compile", "w2", 103.0, 30.0)
    assert nxt is not None and nxt.request_id == "r2"
    assert await store.lease("compile", "w2", 103.0, 30.0) is None
    await store.flush_namespace()
    await store.close()
