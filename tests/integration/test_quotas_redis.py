"""Per-tenant quotas through the proxy over a real Redis, standalone and Cluster: the same flows
as tests/unit/proxy/test_quotas.py (which runs them on the memory store), with the usage counted
by the Redis store's counters."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from distrs.config import StoreSettings
from distrs.store.redis import RedisStore
from tests.unit.proxy.test_quotas import (
    queued_quota_refuses_the_whole_call_and_stores_nothing,
    result_bytes_quota_retry_after_is_the_earliest_expiry,
)

pytestmark = pytest.mark.redis


@pytest.fixture(params=["standalone", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    fixture = "redis_cluster" if request.param == "cluster" else "redis_server"
    url = str(request.getfixturevalue(fixture).url)
    settings = StoreSettings.model_validate({"redis_url": url, "redis_mode": request.param})
    s = RedisStore.from_url(url, settings, namespace=f"q-{uuid.uuid4().hex[:12]}")
    await s.start()
    yield s
    await s.flush_namespace()
    await s.close()


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
