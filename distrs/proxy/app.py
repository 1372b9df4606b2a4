"""The proxy's FastAPI application factory.

``create_app`` wires settings, store, pipeline table, tokens and metrics into one ``AppState``;
the lifespan starts the store and a reaper task that requeues expired leases. A small ASGI
middleware rejects oversize bodies (413) before they are read. Header size, header read time and
idle connections are limited one level down, in the HTTP server (``proxy/server.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI

from distrs.config import ProxySettings, SessionSettings
from distrs.core.pipeline_config import load_pipelines
from distrs.core.stages import PipelineTable
from distrs.metrics import Metrics, SessionMetrics
from distrs.proxy import errors
from distrs.proxy.auth import TokenTable
from distrs.proxy.credentials import CredentialIssuer, derive_secret
from distrs.proxy.deps import AppState
from distrs.proxy.dispatch import ProxyApp, body_framing
from distrs.proxy.gc_policy import GcPolicy
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes import catalog, ops, session_ops, sessions, trainer, worker, workers
from distrs.proxy.sessions import SessionService
from distrs.store.base import QueueStore
from distrs.store.errors import Unavailable
from distrs.store.sessions.base import SessionStore

log = logging.getLogger(__name__)


class BodyLimit:
    """Pure-ASGI guard: 413 when Content-Length (or the streamed body) exceeds the limit."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = body_framing(scope.get("headers", []), self.limit)
        if body == "too_large":
            await self._reject(send)
            return
        if body is None:
            # Without Transfer-Encoding an HTTP/1.1 body is exactly Content-Length bytes (none
            # without one), held to the limit above: the server hands the app no more, so there
            # is nothing to count (and no receive wrapper to pay for on every call)
            await self.app(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send: Any) -> None:
        await reject_too_large(send, self.limit)


async def reject_too_large(send: Any, limit: int) -> None:
    """Answer 413 ``body_too_large`` naming ``limit``."""
    import orjson

    body = orjson.dumps(
        errors.error_body("body_too_large", f"request body exceeds {limit} bytes", {"limit": limit})
    )
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


async def _reaper(state: AppState) -> None:
    while True:
        await asyncio.sleep(state.settings.reaper_interval_s)
        try:
            expired = await state.store.requeue_expired(state.clock(), state.settings.max_attempts)
            for _rid, stage in expired:
                state.metrics.lease_expiries.labels(stage).inc()
            if expired:
                log.warning("requeued %d expired leases", len(expired))
        except Unavailable as e:  # a failover or restart: one line, not a traceback per sweep
            log.warning("lease reaper: store unavailable (%s); retrying", e)
        except Exception:
            log.exception("lease reaper failed; retrying")


def create_app(
    settings: ProxySettings | None = None,
    store: QueueStore | None = None,
    table: PipelineTable | None = None,
    clock: Callable[[], float] = time.time,
    metrics: Metrics | None = None,
    session_settings: SessionSettings | None = None,
    session_store: SessionStore | None = None,
) -> FastAPI:
    settings = settings or ProxySettings()
    if store is None:
        from distrs.store.factory import create_store

        store = create_store(settings)
    table = table or load_pipelines(settings.pipelines_file)
    tokens = TokenTable.load(settings.tokens_file, settings.tokens)
    if not settings.insecure and len(tokens) == 0:
        raise ValueError(
            "no tokens configured: set DISTRS_TOKENS / DISTRS_TOKENS_FILE, or run with --insecure"
        )
    metrics = metrics or Metrics(tenant_labels=settings.metrics_tenant_labels)
    for stage in table.stages:  # labels exist from the start so increase() sees the first expiry
        metrics.lease_expiries.labels(stage)
        metrics.lease_releases.labels(stage)
    secret = settings.worker_credential_secret
    issuer = CredentialIssuer(
        secret.encode() if secret else derive_secret(tokens.secrets()),
        settings.worker_credential_ttl_s,
    )
    state = AppState(
        settings=settings,
        store=store,
        table=table,
        metrics=metrics,
        tokens=tokens,
        credentials=issuer,
        clock=clock,
    )

    session_settings = session_settings or SessionSettings()
    session_service: SessionService | None = None
    if session_settings.enabled:  # stateful sessions (docs/sessions.md): a store of their own
        if session_store is None:
            from distrs.store.sessions import create_session_store

            session_store = create_session_store(settings)
        session_service = SessionService(
            session_settings, session_store, SessionMetrics(metrics.registry), clock
        )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.store.start()
        if session_service is not None:
            await session_service.start()
        task = asyncio.create_task(_reaper(state))
        gc_policy = GcPolicy()
        gc_policy.install()  # after start-up: short collector pauses from here on (gc_policy.py)
        try:
            yield
        finally:
            gc_policy.uninstall()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if session_service is not None:
                await session_service.stop()
            await state.store.close()

    app = ProxyApp(
        title="DistRS reward service",
        version="1",
        default_response_class=JSONResponse,
        lifespan=lifespan,
        description="Request-in, batch-out reward computation with per-stage EBF queues.",
        docs_url="/docs" if settings.docs_enabled else None,
        redoc_url="/redoc" if settings.docs_enabled else None,
        openapi_url="/openapi.json" if settings.docs_enabled else None,
    )
    app.state.distrs = state
    app.state.sessions = session_service
    errors.install(app, settings.retry_after_s)
    # The worker routes first, then the trainer's: they take most calls, and routes are tried in
    # order (before the documentation pages, too). They sit on the app's own router rather than
    # in included ones: FastAPI matches an included router again on every call (about a tenth of
    # a lease's CPU). Their routers carry everything an inclusion would add (prefix, tags, and
    # for the trainer routes this app's response class; the worker routes return their
    # responses themselves).
    # Those of them that take only the request are answered before FastAPI's per-call layers
    # (``ProxyApp``'s hot path, ``dispatch.py``).
    hot = [*worker.router.routes, *trainer.router.routes, *session_ops.router.routes, *sessions.router.routes]
    app.router.routes[0:0] = hot
    app.serve_hot(hot, settings.max_body_bytes, lambda send: reject_too_large(send, settings.max_body_bytes))
    app.include_router(workers.router)
    app.include_router(ops.router)
    app.include_router(catalog.router)
    with contextlib.suppress(ImportError):
        from distrs.proxy.routes import openrlhf, sandboxfusion, slime

        app.include_router(sandboxfusion.router)
        app.include_router(openrlhf.router)
        app.include_router(slime.router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    return app
