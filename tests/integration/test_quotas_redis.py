"""Per-tenant quotas through the proxy over a real Redis, standalone and Cluster: the same flows
as tests/unit/proxy/test_quotas.py (which runs them on the memory store), with the usage counted
by the Redis store's counters."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.store.base import NewRequest
from distrs.store.redis import RedisStore
from tests.integration.redis_stores import redis_store
from tests.unit.proxy.test_quotas import (
    queued_quota_refuses_the_whole_call_and_stores_nothing,
    result_bytes_quota_retry_after_is_the_earliest_expiry,
)

pytestmark = pytest.mark.redis


@pytest.fixture(params=["standalone", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    async with redis_store(request, request.param, "q") as s:
        yield s


Flow = Callable[[RedisStore], Awaitable[None]]


@pytest.mark.parametrize(
    "flow",
    [
        queued_quota_refuses_the_whole_call_and_stores_nothing,
        result_bytes_quota_retry_after_is_the_earliest_expiry,
    ],
    ids=["queued", "result_bytes"],
)
async def test_quota_flows_over_redis(store: RedisStore, flow: Flow) -> None:
    await flow(store)


async def test_a_failed_counter_update_never_fails_the_call_that_landed(store: RedisStore) -> None:
    """The counters are written after the script: if that write fails, the submission and the
    completion still report success (a raised error would make the caller retry what is done),
    and the exact count still tells the truth."""
    k = store.keys
    await store.topology.client.set(k.usage_totals("alice"), "not a hash")  # every HINCRBY on it now fails
    await store.register_batch(BatchInfo(tenant="alice", task="alice/t", batch_id="b", size=1), 100.0)
    out = await store.submit([NewRequest(tenant="alice", task="alice/t", batch_id="b", request_id="r1",
                                         reward_type="synthetic", route=["s"], payload={})], 101.0)  # fmt: skip
    assert out.accepted == ["r1"]
    lease = await store.lease("s", "w", 102.0, 30.0)
    assert lease is not None
    done = await store.complete(
        Completion(
            lease_id=lease.lease_id, run_s=1.0, result=Result(request_id="r1", status=Status.OK, score=1.0)
        ),
        "w",
        103.0,
    )
    assert done.batch_completed and done.request.result is not None
    await store.topology.client.delete(k.usage_totals("alice"))
    exact = await store.tenant_usage("alice", 104.0, exact=True)
    assert exact.queued == 0 and exact.result_bytes == len(done.request.result.model_dump_json())
