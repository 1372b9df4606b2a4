"""A Redis Cluster primary killed (SIGKILL) under load, on a real 3-primary, 3-replica cluster:
its replica takes over, the store follows the new topology by itself, callers see nothing but the
store's ``Unavailable`` (the proxy's 503 with Retry-After; through the proxy here for the
trainers) during the gap, and afterwards no acknowledged request is lost, run into two results,
or changed.

Trainers submit through the proxy (ASGI, the real app over the cluster store) and resubmit
whatever was not acknowledged, as the client does; workers lease and complete against the store
with a deterministic score per request, and a reaper requeues expired leases. Acknowledged
transitions wait for their replica (``redis_wait_replicas``, WAIT), which is what makes them
survive the promotion.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import zlib
from collections import Counter

import httpx
import pytest
from redis.crc import key_slot

from distrs.config import ProxySettings
from distrs.core.model import Completion, Result, Status
from distrs.proxy.app import create_app
from distrs.store.errors import StoreError, Unavailable
from distrs.store.redis import RedisStore
from tests.fixtures.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis

TENANT = "alice"
BATCH = 60  # requests per task
CHUNK = 5  # requests per bulk submission


def score_of(rid: str) -> float:
    return (zlib.crc32(rid.encode()) % 1000) / 1000


async def wait_until(cond: object, cap_s: float = 60.0) -> None:
    """Poll ``cond()`` (a cap, not a timing assertion)."""
    deadline = time.monotonic() + cap_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_a_primary_killed_under_load_loses_doubles_and_changes_nothing(
    failover_redis_cluster: RedisCluster,
) -> None:
    cluster = failover_redis_cluster
    settings = ProxySettings(
        tokens=f"tr:trainer:{TENANT}",
        redis_url=cluster.url,
        redis_mode="cluster",
        reaper_interval_s=3600,  # this test runs its own reaper on the real clock
        retry_after_s=1,
    )
    store = RedisStore.from_url(cluster.url, settings, namespace=f"f-{uuid.uuid4().hex[:8]}")
    await store.start()
    app = create_app(settings, store=store)
    # one task per primary: the killed one holds one task's queue, leases and results
    tasks: dict[int, str] = {}
    for i in range(1000):
        name = f"task-{i}"
        tasks.setdefault(cluster.primary_of(key_slot(store.keys.task_tag(f"{TENANT}/{name}").encode())), name)
        if len(tasks) == 3:
            break
    victim_port, victim_task = next(iter(tasks.items()))

    statuses: Counter[int] = Counter()
    store_errors: Counter[str] = Counter()
    acknowledged: set[tuple[str, str]] = set()
    completions: Counter[tuple[str, str]] = Counter()
    stop = asyncio.Event()

    async def trainer(client: httpx.AsyncClient, task: str) -> None:
        while True:  # registration, retried through the failover like the client does
            r = await client.post("/v1/batches", json={"task": task, "batch_id": "b", "size": BATCH})
            statuses[r.status_code] += 1
            if r.status_code in (200, 201):
                break
            assert r.status_code == 503 and r.headers.get("Retry-After") == "1"
            await asyncio.sleep(0.1)
        for start in range(0, BATCH, CHUNK):
            ids = [f"{task}-r{i}" for i in range(start, start + CHUNK)]
            body = {
                "requests": [
                    {"task": task, "batch_id": "b", "request_id": rid, "reward_type": "synthetic",
                     "payload": {"durations": {"compile": 0.01}}}
                    for rid in ids
                ]
            }  # fmt: skip
            while True:
                r = await client.post("/v1/requests", json=body)
                statuses[r.status_code] += 1
                if r.status_code == 202:
                    acknowledged.update((task, rid) for rid in ids)
                    break
                assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.02)

    async def worker(n: int) -> None:
        while not stop.is_set():
            try:
                lease = await store.lease("compile", f"w{n}", time.time(), 3.0)
                if lease is None:
                    await asyncio.sleep(0.02)
                    continue
                res = Result(request_id=lease.request_id, status=Status.OK, score=score_of(lease.request_id))
                await store.complete(
                    Completion(lease_id=lease.lease_id, run_s=0.01, result=res), f"w{n}", time.time()
                )
                completions[(lease.task, lease.request_id)] += 1
            except Unavailable as exc:
                store_errors[type(exc).__name__] += 1
                await asyncio.sleep(0.1)
            except StoreError as exc:  # a completion refused after its lease was requeued
                store_errors[exc.code] += 1

    async def reaper() -> None:
        while not stop.is_set():
            try:
                await store.requeue_expired(time.time(), max_attempts=20)
            except Unavailable:
                store_errors["reaper_unavailable"] += 1
            await asyncio.sleep(0.25)

    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://p", headers={"Authorization": "Bearer tr"}
        ) as client,
    ):
        background = [asyncio.create_task(worker(n)) for n in range(4)] + [asyncio.create_task(reaper())]
        trainers = [asyncio.create_task(trainer(client, t)) for t in tasks.values()]
        await wait_until(lambda: len(acknowledged) >= BATCH)  # well under way
        cluster.node(victim_port).kill()
        await asyncio.gather(*trainers)
        await asyncio.get_running_loop().run_in_executor(None, cluster.wait_ok, 60.0)
        # every acknowledged request finishes, on the promoted replica for the victim's task
        expected = {(f"{TENANT}/{t}", f"{t}-r{i}") for t in tasks.values() for i in range(BATCH)}

        async def done() -> bool:
            for t in tasks.values():
                b = await store.get_batch(f"{TENANT}/{t}", "b")
                if b is None or not b.complete:
                    return False
            return True

        deadline = time.monotonic() + 90
        while True:
            try:
                if await done():
                    break
            except Unavailable:
                pass
            assert time.monotonic() < deadline, "batches did not finish after the failover"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*background)

    assert (
        cluster.primary_of(key_slot(store.keys.task_tag(f"{TENANT}/{victim_task}").encode())) != victim_port
    )
    assert set(statuses) <= {200, 201, 202, 503}, statuses  # never a 500
    assert len(acknowledged) == 3 * BATCH
    for t in tasks.values():
        results = await store.batch_results(f"{TENANT}/{t}", "b")
        ids = [r.request_id for r in results]
        assert sorted(ids) == sorted(f"{t}-r{i}" for i in range(BATCH))  # none lost, none twice
        assert all(
            r.status is Status.OK and r.score == pytest.approx(score_of(r.request_id)) for r in results
        )
    assert {k for k in completions} <= expected
    await store.flush_namespace()
    await store.close()
