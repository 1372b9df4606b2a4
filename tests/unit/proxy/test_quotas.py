"""Per-tenant quotas through the proxy: 429 ``quota_exceeded`` with ``Retry-After`` on every submit
path, nothing of a refused call stored, other tenants and completions unaffected; usage visible
to the tenant and the admin, and on /metrics only with tenant labels."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from distrs.config import ProxySettings
from distrs.proxy.app import create_app
from distrs.proxy.quotas import Limits, limits_for
from distrs.store.base import QueueStore
from distrs.store.memory import MemoryStore
from tests.unit.proxy.conftest import TOKENS, Clock

Client = Callable[[str | None], httpx.AsyncClient]
TTL = ProxySettings().result_ttl_s


@asynccontextmanager
async def proxy(store: QueueStore, clock: Clock, **settings: Any) -> AsyncIterator[Client]:
    s = ProxySettings.model_validate(
        {"tokens": TOKENS, "reaper_interval_s": 3600, "lease_ttl_s": 10, "compat_wait_s": 1.0} | settings
    )
    app = create_app(s, store=store, clock=clock)
    transport = httpx.ASGITransport(app=app)
    made: list[httpx.AsyncClient] = []

    def client(token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.AsyncClient(transport=transport, base_url="http://proxy", headers=headers)
        made.append(c)
        return c

    async with app.router.lifespan_context(app):
        try:
            yield client
        finally:
            for c in made:
                await c.aclose()


def synth(rid: str, batch: str = "b") -> dict[str, Any]:
    return {
        "task": "t",
        "batch_id": batch,
        "request_id": rid,
        "reward_type": "synthetic",
        "payload": {"durations": {"compile": 1}},
    }


async def register(c: httpx.AsyncClient, batch: str = "b", size: int = 10) -> None:
    r = await c.post("/v1/batches", json={"task": "t", "batch_id": batch, "size": size})
    assert r.status_code == 201, r.text


def assert_refused(r: httpx.Response, field: str, status: int = 429) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == "quota_exceeded" and err["details"]["field"] == field
    assert field in err["message"] and "tenant-a" in err["message"]
    if status == 429:
        assert int(r.headers["Retry-After"]) == err["details"]["retry_after_s"] >= 1
    return dict(err["details"])


async def finish_all(worker: httpx.AsyncClient) -> int:
    n = 0
    while (
        r := await worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w", "wait_s": 0})
    ).status_code == 200:
        lease = r.json()
        done = await worker.post(
            f"/v1/leases/{lease['lease_id']}/complete",
            json={
                "worker_id": "w",
                "outcome": "final",
                "result": {"status": "ok", "score": 1.0, "detail": {"note": "x" * 200}},
            },
        )
        assert done.status_code == 200, done.text
        n += 1
    return n


async def test_queued_quota_refuses_the_whole_call_and_stores_nothing() -> None:
    await queued_quota_refuses_the_whole_call_and_stores_nothing(MemoryStore())


async def queued_quota_refuses_the_whole_call_and_stores_nothing(store: QueueStore) -> None:
    """Shared with tests/integration/test_quotas_redis.py (the same flow over Redis)."""
    clock = Clock()
    async with proxy(store, clock, tenant_max_queued=3, quota_retry_after_s=7) as client:
        a, b, wk = client("ta"), client("tb"), client("wk")
        await register(a)
        ok = await a.post("/v1/requests", json={"requests": [synth("r1"), synth("r2")]})
        assert ok.status_code == 202 and ok.json()["accepted"] == 2
        over = await a.post("/v1/requests", json={"requests": [synth("r3"), synth("r4")]})
        d = assert_refused(over, "max_queued")
        assert (d["limit"], d["usage"], d["requested"], d["retry_after_s"]) == (3, 2, 2, 7)
        assert over.headers["Retry-After"] == "7"
        assert await store.get_request("tenant-a/t", "r3") is None  # nothing of it stored
        batch = await store.get_batch("tenant-a/t", "b")
        assert batch is not None and batch.submitted == 2
        # one more fits; another tenant is not affected by tenant-a's usage
        assert (await a.post("/v1/requests", json=synth("r3"))).status_code == 202
        await register(b)
        assert (
            await b.post("/v1/requests", json={"requests": [synth("x1"), synth("x2")]})
        ).status_code == 202
        # a call larger than the quota itself can never fit: 413, not a retry loop
        big = await a.post("/v1/requests", json={"requests": [synth(f"z{i}") for i in range(4)]})
        assert_refused(big, "max_queued", status=413)
        # completions are never refused, and free room again
        assert await finish_all(wk) == 5
        assert (await a.post("/v1/requests", json=synth("r4"))).status_code == 202


async def test_per_tenant_override_replaces_the_default() -> None:
    store, clock = MemoryStore(), Clock()
    quotas = {"tenant-b": {"max_queued": 0}}  # no limit for tenant-b
    async with proxy(store, clock, tenant_max_queued=1, tenant_quotas=quotas) as client:
        a, b = client("ta"), client("tb")
        await register(a)
        await register(b)
        assert (await b.post("/v1/requests", json={"requests": [synth("1"), synth("2")]})).status_code == 202
        assert_refused(
            await a.post("/v1/requests", json={"requests": [synth("1"), synth("2")]}), "max_queued", 413
        )


async def test_result_bytes_quota_retry_after_is_the_earliest_expiry() -> None:
    await result_bytes_quota_retry_after_is_the_earliest_expiry(MemoryStore())


async def result_bytes_quota_retry_after_is_the_earliest_expiry(store: QueueStore) -> None:
    clock = Clock()
    async with proxy(store, clock, tenant_max_result_bytes=300) as client:
        a, wk = client("ta"), client("wk")
        await register(a, size=2)
        assert (
            await a.post("/v1/requests", json={"requests": [synth("r1"), synth("r2")]})
        ).status_code == 202
        assert await finish_all(wk) == 2  # the batch completes at t=1000 and is kept for TTL
        clock.t = 1010.0
        await register(a, batch="b2")
        over = await a.post("/v1/requests", json=synth("r3", batch="b2"))
        d = assert_refused(over, "max_result_bytes")
        assert d["usage"] > 300 and d["retry_after_s"] == TTL - 10
        assert await store.get_request("tenant-a/t", "r3") is None
        clock.t = 1000.0 + TTL + 1  # the results expired: room again
        assert (await a.post("/v1/requests", json=synth("r3", batch="b2"))).status_code == 202


@pytest.mark.parametrize("path", ["/slime/reward", "/get_reward"])
async def test_compat_paths_are_refused_before_anything_is_stored(path: str) -> None:
    store, clock = MemoryStore(), Clock()
    async with proxy(store, clock, tenant_max_queued=1) as client:
        a = client("ta")
        await register(a)
        assert (await a.post("/v1/requests", json=synth("r1"))).status_code == 202
        body: dict[str, Any] = (
            {"response": "42", "label": "42"}
            if path == "/slime/reward"
            else {"query": ["x 42"], "prompts": ["x "], "labels": ["42"]}
        )
        before = await store.snapshot(clock.t)
        r = await a.post(path, json=body)
        assert_refused(r, "max_queued")
        after = await store.snapshot(clock.t)
        assert (
            [x.batch.batch_id for x in after.batches] == [x.batch.batch_id for x in before.batches] == ["b"]
        )
        assert (await store.tenant_usage("tenant-a", clock.t)).queued == 1


async def test_usage_is_shown_to_its_tenant_and_the_admin_and_never_on_open_metrics() -> None:
    store, clock = MemoryStore(), Clock()
    async with proxy(store, clock, tenant_max_queued=100) as client:
        a, b, ad, anon = client("ta"), client("tb"), client("ad"), client(None)
        await register(a)
        assert (
            await a.post("/v1/requests", json={"requests": [synth("r1"), synth("r2")]})
        ).status_code == 202
        own = (await a.get("/v1/usage")).json()
        assert own["tenant"] == "tenant-a" and own["queued"] == 2
        assert own["limits"] == {"max_queued": 100, "max_result_bytes": 0}
        assert (await b.get("/v1/usage")).json()["queued"] == 0
        assert (await b.get("/v1/usage", params={"tenant": "tenant-a"})).status_code == 403
        assert (await ad.get("/v1/usage", params={"tenant": "tenant-a"})).json()["queued"] == 2
        tenants = (await ad.get("/v1/stats")).json()["tenants"]
        assert tenants["tenant-a"]["queued"] == 2 and tenants["tenant-b"]["queued"] == 0
        assert (await a.get("/v1/stats")).status_code == 403
        scrape = (await anon.get("/metrics")).text
        assert "tenant-a" not in scrape and "tenant-b" not in scrape
        assert "distrs_tenant_queued_requests{" not in scrape
    async with proxy(store, clock, metrics_tenant_labels=True) as client:
        scrape = (await client(None).get("/metrics")).text
        assert 'distrs_tenant_queued_requests{tenant="tenant-a"} 2.0' in scrape
        assert 'distrs_tenant_result_bytes{tenant="tenant-a"} 0.0' in scrape


def test_quota_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRS_TENANT_MAX_RESULT_BYTES", "100")
    monkeypatch.setenv("DISTRS_TENANT_QUOTAS", '{"alice": {"max_queued": 5}, "bob": {"max_result_bytes": 0}}')
    s = ProxySettings()
    assert limits_for(s, "alice") == Limits(max_queued=5, max_result_bytes=100)
    assert limits_for(s, "bob") == Limits(max_queued=0, max_result_bytes=0)
    assert limits_for(s, "carol") == Limits(max_queued=0, max_result_bytes=100)
    monkeypatch.setenv("DISTRS_TENANT_QUOTAS", '{"alice": {"max_queued": -1}}')
    with pytest.raises(ValueError, match="max_queued"):
        ProxySettings()
