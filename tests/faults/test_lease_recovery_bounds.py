"""The default lease timing, driven with the clock passed in, on both stores (memory and a real
``redis-server``): a lease whose worker stopped is requeued by the first expiry sweep after
``lease_ttl_s``, which leaves room for the batch to finish within 10 s of the worker stopping
(benchmarks/recovery.py measures that live), while a worker whose heartbeats come late by up to
the documented margin never loses its lease."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from distrs.config import ProxySettings
from distrs.core.model import BatchInfo
from distrs.proxy.routes.worker import heartbeat_period
from distrs.store.base import NewRequest, QueueStore
from distrs.store.memory import MemoryStore
from distrs.store.redis import RedisStore

# A stopped worker's request is back in its queue within this long (a sweep included).
REQUEUE_BOUND_S = 5.0
# How late a heartbeat may come (beyond its period) without the lease expiring.
HEARTBEAT_MARGIN_S = 3.0
DEFAULTS = ProxySettings()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[QueueStore]:
    s: QueueStore
    if request.param == "memory":
        s = MemoryStore()
    else:
        url = str(request.getfixturevalue("redis_server").url)
        s = RedisStore.from_url(url, DEFAULTS, namespace=f"t-{uuid.uuid4().hex[:12]}")
    await s.start()
    yield s
    if isinstance(s, RedisStore):
        await s.flush_namespace()
    await s.close()


async def one_leased_request(store: QueueStore) -> str:
    """A one-request batch, leased at time 0 with the default TTL; the lease id."""
    await store.register_batch(BatchInfo(tenant="a", task="a/t", batch_id="b", size=1), 0.0)
    payload = {"durations": {"compile": 1.0}}
    new = NewRequest(
        tenant="a",
        task="a/t",
        batch_id="b",
        request_id="r",
        reward_type="synthetic",
        route=["compile"],
        payload=payload,
    )
    await store.submit([new], 0.0)
    lease = await store.lease("compile", "w1", 0.0, DEFAULTS.lease_ttl_s, holder="h1")
    assert lease is not None
    return lease.lease_id


def sweeps(until: float) -> list[float]:
    """The expiry sweep times up to ``until`` (the reaper runs every reaper_interval_s)."""
    step = DEFAULTS.reaper_interval_s
    return [k * step for k in range(1, int(until / step) + 1)]


async def test_a_stopped_workers_lease_is_requeued_within_the_bound(store: QueueStore) -> None:
    lease_id = await one_leased_request(store)
    worst = DEFAULTS.lease_ttl_s + DEFAULTS.reaper_interval_s  # the first sweep after the deadline
    assert worst <= REQUEUE_BOUND_S
    requeued_at = None
    for t in sweeps(worst):
        if await store.requeue_expired(t, DEFAULTS.max_attempts):
            requeued_at = t
            break
    assert requeued_at is not None and requeued_at <= REQUEUE_BOUND_S
    # back in its queue: another worker takes it, and the stopped holder's lease is gone
    again = await store.lease("compile", "w2", requeued_at, DEFAULTS.lease_ttl_s, holder="h2")
    assert again is not None and again.request_id == "r" and again.lease_id != lease_id


async def test_heartbeats_late_by_the_margin_never_lose_the_lease(store: QueueStore) -> None:
    period = heartbeat_period(DEFAULTS.lease_ttl_s)
    assert DEFAULTS.lease_ttl_s - period >= HEARTBEAT_MARGIN_S
    lease_id = await one_leased_request(store)
    beat, late = 0.0, HEARTBEAT_MARGIN_S - 0.01
    for _ in range(5):  # every beat arrives its period plus the margin after the previous one
        due = beat + period + late
        for t in sweeps(due):
            if t > beat:
                assert await store.requeue_expired(t, DEFAULTS.max_attempts) == []
        await store.heartbeat(lease_id, "h1", due, DEFAULTS.lease_ttl_s)
        beat = due
    assert await store.lease("compile", "w2", beat, DEFAULTS.lease_ttl_s, holder="h2") is None
