"""The proxy's hot path (``proxy/dispatch.py``): its routes skip FastAPI's per-call layers, and
still answer errors, oversize bodies and wrong methods exactly as the full stack does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest

from distrs.config import ProxySettings
from distrs.proxy.app import create_app
from distrs.proxy.dispatch import ProxyApp
from distrs.store.errors import Unavailable
from distrs.store.memory import MemoryStore

WORKER = {"Authorization": "Bearer wk"}
LEASE = {"stage": "compile", "worker_id": "w1", "wait_s": 0}


class Seen:
    """An ASGI middleware of the app's own stack that records the paths it saw."""

    paths: ClassVar[list[str]] = []

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            Seen.paths.append(scope["path"])
        await self.app(scope, receive, send)


class Broken(MemoryStore):
    """A store whose lease fails as ``fault`` says."""

    fault: BaseException | None = None

    async def lease(self, *args: Any, **kwargs: Any) -> Any:
        if self.fault is not None:
            raise self.fault
        return await super().lease(*args, **kwargs)


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[ProxyApp, Broken, httpx.AsyncClient]]:
    settings = ProxySettings(
        tokens="ta:trainer:tenant-a,wk:worker", max_body_bytes=4096, reaper_interval_s=3600
    )
    store = Broken()
    app = create_app(settings, store=store)
    assert isinstance(app, ProxyApp)
    app.add_middleware(Seen)
    Seen.paths = []
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://proxy", headers=WORKER) as client,
    ):
        yield app, store, client


async def test_a_hot_route_skips_the_stack_and_the_others_do_not(proxy: Any) -> None:
    _, _, client = proxy
    r = await client.post("/v1/leases", json=LEASE)
    assert r.status_code == 204
    assert Seen.paths == []
    r = await client.get("/healthz")
    assert r.status_code == 200
    assert Seen.paths == ["/healthz"]


async def test_store_errors_are_answered_by_the_apps_handlers(proxy: Any) -> None:
    _, store, client = proxy
    store.fault = Unavailable("primary gone")
    r = await client.post("/v1/leases", json=LEASE)
    assert r.status_code == 503 and "retry-after" in r.headers
    assert r.json()["error"]["code"] == "store_unavailable"
    assert Seen.paths == []


async def test_a_fault_is_an_internal_error_not_a_crash(proxy: Any) -> None:
    _, store, client = proxy
    store.fault = RuntimeError("bug")
    r = await client.post("/v1/leases", json=LEASE)
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal_error"
    store.fault = None
    assert (await client.post("/v1/leases", json=LEASE)).status_code == 204  # still serving


async def test_bad_input_wrong_method_and_oversize_bodies_as_on_the_full_stack(proxy: Any) -> None:
    _, _, client = proxy
    r = await client.post("/v1/leases", json={"stage": "compile"})
    assert r.status_code == 422 and "worker_id" in r.json()["error"]["message"]
    r = await client.get("/v1/leases")
    assert r.status_code == 405
    assert Seen.paths == ["/v1/leases"]  # a method the route does not take: the full stack
    r = await client.post("/v1/leases", content=b"{" + b" " * 5000 + b"}")
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b" " * 1000

    r = await client.post("/v1/leases", content=chunks())
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert Seen.paths[-1] == "/v1/leases"  # a chunked body is counted by the full stack


async def test_with_telemetry_configured_every_call_takes_the_full_stack(proxy: Any) -> None:
    app, _, client = proxy

    class On:
        """FastAPI's telemetry layer with a provider configured, reduced to passing the call on."""

        def enabled(self) -> bool:
            return True

        async def __call__(self, app: Any, scope: Any, receive: Any, send: Any, **_: Any) -> None:
            await app(scope, receive, send)

    app._native_telemetry = On()
    app._hot_on = None
    r = await client.post("/v1/leases", json=LEASE)
    assert r.status_code == 204
    assert Seen.paths == ["/v1/leases"]
