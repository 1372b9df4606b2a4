"""Completions of requests with no stored route through the proxy over a real Redis, standalone
and Cluster: the flows of tests/unit/proxy/test_route_backfill.py (which runs them on the memory
store), over hashes written as the release that stored no route wrote them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from distrs.store.redis import RedisStore
from tests.integration.redis_stores import redis_store
from tests.unit.proxy.test_route_backfill import FLOWS

pytestmark = pytest.mark.redis


@pytest.fixture(params=["standalone", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    async with redis_store(request, request.param, "rb") as s:
        yield s


@pytest.mark.parametrize("flow", FLOWS, ids=[f.__name__ for f in FLOWS])
async def test_flows_over_redis(store: RedisStore, flow: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await flow(store, monkeypatch)
