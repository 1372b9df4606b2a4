"""The proxy app (memory store, small limits) with a client per role, and a tiny in-test worker
that completes leases through the worker API, for the hostile-input tier."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from distrs.config import ProxySettings
from distrs.proxy.app import create_app
from distrs.store.memory import MemoryStore

TOKENS = "ta:trainer:tenant-a,tb:trainer:tenant-b,wk:worker,ad:admin,mx:metrics"
LIMITS = dict(
    max_payload_bytes=4096,
    run_code_max_payload_bytes=8192,
    max_body_bytes=256 * 1024,
    max_bulk=50,
    max_artifact_bytes=2048,
)


@dataclass
class Hostile:
    a: httpx.AsyncClient  # trainer of tenant-a
    b: httpx.AsyncClient  # trainer of tenant-b
    worker: httpx.AsyncClient
    admin: httpx.AsyncClient
    metrics: httpx.AsyncClient
    anon: httpx.AsyncClient
    bad: httpx.AsyncClient  # an unknown token
    store: MemoryStore

    def by_name(self, name: str) -> httpx.AsyncClient:
        client: httpx.AsyncClient = getattr(self, name)
        return client


def clients(app: Any) -> dict[str, httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)

    def client(token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(transport=transport, base_url="http://proxy", headers=headers, timeout=30)

    names = {"a": "ta", "b": "tb", "worker": "wk", "admin": "ad", "metrics": "mx", "anon": None, "bad": "zz"}
    return {k: client(v) for k, v in names.items()}


@pytest.fixture
async def hostile(request: pytest.FixtureRequest) -> AsyncIterator[Hostile]:
    extra: dict[str, Any] = getattr(request, "param", {})
    settings = ProxySettings(tokens=TOKENS, lease_ttl_s=30, reaper_interval_s=3600, **{**LIMITS, **extra})
    store = MemoryStore()
    app = create_app(settings, store=store)
    async with app.router.lifespan_context(app):
        cs = clients(app)
        try:
            yield Hostile(**cs, store=store)
        finally:
            for c in cs.values():
                await c.aclose()


async def work(worker: httpx.AsyncClient, stages: list[str], stop: asyncio.Event, score: float = 1.0) -> int:
    """Lease from ``stages`` and complete each lease ``final`` with ``score`` until ``stop``;
    returns how many it completed. Math requests are scored by the ground truth they carry."""
    done = 0
    while not stop.is_set():
        for stage in stages:
            r = await worker.post("/v1/leases", json={"stage": stage, "worker_id": "w-test", "wait_s": 0})
            if r.status_code != 200:
                continue
            ls = r.json()
            p = ls["payload"]
            s = score
            if "ground_truth" in p:
                s = 1.0 if p["ground_truth"] in p["completion"] else 0.0
            body = {"worker_id": "w-test", "outcome": "final", "result": {"status": "ok", "score": s}}
            r = await worker.post(f"/v1/leases/{ls['lease_id']}/complete", json=body)
            assert r.status_code == 200, r.text
            done += 1
        await asyncio.sleep(0.01)
    return done
