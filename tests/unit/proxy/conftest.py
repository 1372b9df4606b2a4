"""An in-process proxy over the memory store with a controllable clock (no network, no processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from distrs.config import ProxySettings
from distrs.proxy.app import create_app
from distrs.store.memory import MemoryStore

TOKENS = "ta:trainer:tenant-a,tb:trainer:tenant-b,wk:worker,ad:admin"


@dataclass
class Clock:
    t: float = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Api:
    trainer: httpx.AsyncClient
    other_tenant: httpx.AsyncClient
    worker: httpx.AsyncClient
    admin: httpx.AsyncClient
    anon: httpx.AsyncClient
    clock: Clock
    store: MemoryStore


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    settings = ProxySettings(
        tokens=TOKENS,
        max_payload_bytes=4096,
        max_artifact_bytes=2048,
        max_body_bytes=64 * 1024,
        max_bulk=50,
        lease_ttl_s=10,
        reaper_interval_s=3600,
    )
    clock = Clock()
    store = MemoryStore()
    app = create_app(settings, store=store, clock=clock)
    transport = httpx.ASGITransport(app=app)

    def client(token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(transport=transport, base_url="http://proxy", headers=headers)

    async with app.router.lifespan_context(app):
        clients = [client(t) for t in ("ta", "tb", "wk", "ad", None)]
        try:
            yield Api(*clients, clock=clock, store=store)
        finally:
            for c in clients:
                await c.aclose()
