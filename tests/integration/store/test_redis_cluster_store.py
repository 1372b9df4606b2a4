"""Cluster-only store behaviour on a real 3-primary, 3-replica Redis Cluster
(tests/fixtures/redis_cluster.py): where a task's keys live, EBF order across shards, totals over
all shards (snapshot and ``/v1/stats``). The contract itself runs in test_store_conformance.py.

Task names are chosen by the shard their hash tag lands on (``primary_of``), so "another shard"
is a fact of the running cluster, not an assumption about CRC16.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.crc import key_slot

from distrs.config import ProxySettings, StoreSettings
from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.proxy.app import create_app
from distrs.store.base import CompleteOutcome, NewRequest
from distrs.store.errors import UnknownLease
from distrs.store.keys import Keys
from distrs.store.redis import RedisStore
from tests.fixtures.redis_cluster import RedisCluster, command

pytestmark = pytest.mark.redis


def _settings(url: str, **kw: object) -> StoreSettings:
    return StoreSettings.model_validate(
        {"redis_url": url, "redis_mode": "cluster", "default_batch_span_s": 600, **kw}
    )


@pytest.fixture
async def store(redis_cluster: RedisCluster) -> AsyncIterator[RedisStore]:
    s = RedisStore.from_url(
        redis_cluster.url, _settings(redis_cluster.url), namespace=f"c-{uuid.uuid4().hex[:10]}"
    )
    await s.start()
    yield s
    await s.flush_namespace()
    await s.close()


def tasks_on_distinct_primaries(cluster: RedisCluster, keys: Keys, n: int = 3) -> list[str]:
    """``n`` task names (``tenant/task``) whose keys live on ``n`` different primaries."""
    picked: dict[int, str] = {}
    for i in range(1000):
        task = f"alice/task-{i}"
        primary = cluster.primary_of(key_slot(keys.task_tag(task).encode()))
        picked.setdefault(primary, task)
        if len(picked) == n:
            return list(picked.values())
    raise AssertionError("no tasks on distinct primaries")


def req(task: str, batch: str, rid: str) -> NewRequest:
    return NewRequest(
        tenant="alice", task=task, batch_id=batch, request_id=rid, reward_type="synthetic",
        route=["compile", "execute"], payload={"rid": rid},
    )  # fmt: skip


async def test_a_tasks_keys_share_the_slot_its_verbatim_tag_names(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    task = "alice/gsm8k:v2"
    await store.register_batch(BatchInfo(tenant="alice", task=task, batch_id="b", size=2), 100.0)
    await store.submit([req(task, "b", "r1"), req(task, "b", "r2")], 101.0)
    lease = await store.lease("compile", "w", 102.0, 30.0)
    assert lease is not None
    await store.complete(
        Completion(lease_id=lease.lease_id, outcome="next", run_s=1.0, artifacts={"bin": "x"}), "w", 103.0
    )
    tag = "{" + f"{store.keys.ns}:t:{task}" + "}"  # the task name verbatim, tenant included
    slot = int(command(redis_cluster.nodes[0].port, "CLUSTER", "KEYSLOT", tag))
    port = redis_cluster.primary_of(slot)
    found = command(port, "--scan", "--pattern", f"*{store.keys.ns}*").split()
    task_keys = [k for k in found if k.startswith(tag)]
    assert any(":batch:" in k for k in task_keys) and any(":req:" in k for k in task_keys)
    assert any(k.endswith(":queue:execute") for k in task_keys)
    # every key of the task (its lease and lease index included) is in that one slot
    lease2 = await store.lease("execute", "w", 104.0, 30.0)
    assert lease2 is not None
    for key in [*task_keys, store.keys.lease(lease2.lease_id), store.keys.leases(slot)]:
        assert key_slot(key.encode()) == slot, key


async def test_an_earlier_batch_on_one_shard_is_served_before_later_ones_on_others(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    late, early, middle = tasks_on_distinct_primaries(redis_cluster, store.keys)
    # estimated completion T = anchor + 600 s: late 700, middle 650, early 610
    for task, anchor in ((late, 100.0), (middle, 50.0), (early, 10.0)):
        await store.register_batch(
            BatchInfo(tenant="alice", task=task, batch_id="b", size=3, rollout_started_at=anchor), 100.0
        )
    # submitted latest-T first: arrival order is the opposite of EBF order
    for task in (late, middle, early):
        await store.submit([req(task, "b", f"{task}#{i}") for i in range(3)], 101.0)
    order = []
    while (lease := await store.lease("compile", "w", 102.0, 30.0)) is not None:
        order.append(lease.request_id)
    assert order == [f"{t}#{i}" for t in (early, middle, late) for i in range(3)]


async def test_a_bundle_takes_across_shards_in_ebf_order(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    late, early, middle = tasks_on_distinct_primaries(redis_cluster, store.keys)
    for task, anchor in ((late, 100.0), (middle, 50.0), (early, 10.0)):
        await store.register_batch(
            BatchInfo(tenant="alice", task=task, batch_id="b", size=2, rollout_started_at=anchor), 100.0
        )
        await store.submit([req(task, "b", f"{task}#{i}") for i in range(2)], 101.0)
    bundle = await store.lease_many("compile", "w", 102.0, 30.0, k=5)
    assert [x.request_id for x in bundle] == [
        f"{early}#0",
        f"{early}#1",
        f"{middle}#0",
        f"{middle}#1",
        f"{late}#0",
    ]
    # leases of three slots in one call: each lands, answered in the caller's order
    items = [Completion(lease_id=x.lease_id, result=Result(request_id="", status=Status.OK)) for x in bundle]
    outs = await store.complete_many(items, "w", 103.0)
    assert [o.request.request_id for o in outs if isinstance(o, CompleteOutcome)] == [
        x.request_id for x in bundle
    ]
    beats = await store.heartbeat_many([x.lease_id for x in bundle], "w", 104.0, 30.0)
    assert all(isinstance(b, UnknownLease) for b in beats)  # finished: unknown in every slot
    assert [r.request_id for r in await store.batch_results(early, "b")] == [f"{early}#0", f"{early}#1"]


async def test_snapshot_and_stats_total_over_all_shards(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    tasks = tasks_on_distinct_primaries(redis_cluster, store.keys)
    for n, task in enumerate(tasks, start=1):
        await store.register_batch(BatchInfo(tenant="alice", task=task, batch_id="b", size=n + 1), 100.0)
        await store.submit([req(task, "b", f"r{i}") for i in range(n + 1)], 101.0)  # 2 + 3 + 4
    leased = await store.lease_many("compile", "w", 102.0, 30.0, k=4)
    assert len(leased) == 4
    snap = await store.snapshot(103.0)
    assert snap.queue_depth == {"compile": 9 - 4}
    assert snap.running == {"compile": 4}
    assert sorted(b.batch.task for b in snap.batches) == sorted(tasks)
    assert sum(sum(b.queued.values()) for b in snap.batches) == 5

    settings = ProxySettings(tokens="ad:admin", redis_url=redis_cluster.url, redis_mode="cluster")
    app = create_app(settings, store=store, clock=lambda: 103.0)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://proxy", headers={"Authorization": "Bearer ad"}
    ) as admin:
        stats = (await admin.get("/v1/stats")).json()
    assert stats["queues"] == {"compile": 5}
    assert stats["running"] == {"compile": 4}
    assert len(stats["active_batches"]) == 3


def _zrange_calls(cluster: RedisCluster) -> int:
    """ZRANGE calls on every primary since the last ``CONFIG RESETSTAT`` (INFO commandstats)."""
    total = 0
    for port in cluster.primaries():
        for line in command(port, "INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_zrange:"):
                total += int(line.split("calls=", 1)[1].split(",", 1)[0])
    return total


async def _lease_counting_zranges(
    store: RedisStore, cluster: RedisCluster, now: float
) -> tuple[list[str], int]:
    for port in cluster.primaries():
        command(port, "CONFIG", "RESETSTAT")
    got = await store.lease("compile", "w", now, 30.0)
    return [got.request_id] if got else [], _zrange_calls(cluster)


async def test_idle_tasks_leave_the_ready_index_and_cost_a_lease_nothing(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    idle = [f"alice/idle-{i}" for i in range(200)]
    for task in idle:
        await store.register_batch(BatchInfo(tenant="alice", task=task, batch_id="b", size=1), 100.0)
    await store.submit([req(task, "b", "r") for task in idle], 101.0)
    leased = await store.lease_many("compile", "w", 102.0, 30.0, k=200)
    assert len(leased) == 200
    items = [Completion(lease_id=x.lease_id, result=Result(request_id="", status=Status.OK)) for x in leased]
    assert all(
        isinstance(o, CompleteOutcome) and o.batch_completed
        for o in await store.complete_many(items, "w", 103.0)
    )
    assert await store.lease("compile", "w", 104.0, 30.0) is None  # reads the drained queues once
    live = "alice/live"
    await store.register_batch(BatchInfo(tenant="alice", task=live, batch_id="b", size=2), 105.0)
    await store.submit([req(live, "b", "x0"), req(live, "b", "x1")], 106.0)

    # this process and a fresh one (no copy of the index) each read the live task's head only
    other = RedisStore.from_url(redis_cluster.url, store.settings, namespace=store.keys.ns)
    await other.start()
    try:
        for s, rid in ((store, "x0"), (other, "x1")):
            got, zranges = await _lease_counting_zranges(s, redis_cluster, 107.0)
            assert got == [rid]
            assert zranges <= 5, zranges  # the index, the live head; not 200 idle heads
    finally:
        await other.close()
    assert len(await store.topology.known_tasks(fresh=True)) == 201  # the registry keeps them all

    # an idle task that gets work again is marked again and served
    await store.register_batch(BatchInfo(tenant="alice", task=idle[7], batch_id="b2", size=1), 108.0)
    await store.submit([req(idle[7], "b2", "again")], 109.0)
    other = RedisStore.from_url(redis_cluster.url, store.settings, namespace=store.keys.ns)
    await other.start()
    try:
        lease = await other.lease("compile", "w", 110.0, 30.0)
    finally:
        await other.close()
    assert lease is not None and lease.request_id == "again"


async def test_work_whose_ready_mark_was_lost_is_found_by_the_repair_pass(store: RedisStore) -> None:
    task = "alice/lost-mark"
    await store.register_batch(BatchInfo(tenant="alice", task=task, batch_id="b", size=1), 100.0)
    await store.submit([req(task, "b", "r")], 101.0)
    await store.topology.client.delete(store.keys.ready("compile"))  # as if the mark never landed
    store.topology.ready.copies.clear()
    assert await store.lease("compile", "w", 102.0, 30.0) is None
    await store.requeue_expired(103.0, max_attempts=3)  # the expiry sweep repairs the index
    lease = await store.lease("compile", "w", 104.0, 30.0)
    assert lease is not None and lease.request_id == "r"


async def test_an_unmark_read_before_a_newer_mark_leaves_the_task_marked(store: RedisStore) -> None:
    task = "alice/marked"
    await store.topology.ready.mark([("compile", task)])
    seen = (await store.topology.ready.tasks("compile", fresh=True))[task]
    await store.topology.ready.mark([("compile", task)])  # work queued after the lease's look
    await store.topology.ready.prune("compile", {task: seen})
    now = await store.topology.ready.tasks("compile", fresh=True)
    assert now[task] > seen  # still marked, with the newer generation
    await store.topology.ready.prune("compile", {task: now[task]})
    assert task not in await store.topology.ready.tasks("compile", fresh=True)
