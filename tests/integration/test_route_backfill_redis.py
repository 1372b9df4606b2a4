"""Completions of requests with no stored route through the proxy over a real Redis, standalone
and Cluster: the flows of tests/unit/proxy/test_route_backfill.py (which runs them on the memory
store), over hashes written as the release that stored no route wrote them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from distrs.config import StoreSettings
from distrs.store.redis import RedisStore
from tests.unit.proxy.test_route_backfill import FLOWS

pytestmark = pytest.mark.redis


@pytest.fixture(params=["standalone", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    fixture = "redis_cluster" if request.param == "cluster" else "redis_server"
    url = str(request.getfixturevalue(fixture).url)
    settings = StoreSettings.model_validate({"redis_url": url, "redis_mode": request.param})
    s = RedisStore.from_url(url, settings, namespace=f"rb-{uuid.uuid4().hex[:12]}")
    await s.start()
    yield s
    await s.flush_namespace()
    await s.close()


@pytest.mark.parametrize("flow", FLOWS, ids=[f.__name__ for f in FLOWS])
async def test_flows_over_redis(store: RedisStore, flow: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await flow(store, monkeypatch)
