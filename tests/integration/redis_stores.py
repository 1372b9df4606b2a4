"""A RedisStore on a test's Redis (standalone or cluster) in a namespace of its own, flushed after."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from distrs.config import StoreSettings
from distrs.store.redis import RedisStore


@asynccontextmanager
async def redis_store(request: pytest.FixtureRequest, mode: str, prefix: str) -> AsyncIterator[RedisStore]:
    fixture = "redis_cluster" if mode == "cluster" else "redis_server"
    url = str(request.getfixturevalue(fixture).url)
    settings = StoreSettings.model_validate({"redis_url": url, "redis_mode": mode})
    s = RedisStore.from_url(url, settings, namespace=f"{prefix}-{uuid.uuid4().hex[:12]}")
    await s.start()
    try:
        yield s
    finally:
        await s.flush_namespace()
        await s.close()
