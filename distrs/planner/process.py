"""``distrs planner``: the planner as its own process over a shared Redis store.

It serves ``/metrics``, ``/healthz`` and ``/readyz`` on ``metrics_port`` and drives either the
Kubernetes actuator (worker Deployments; leader election when several planner replicas run) or
the local process pool. ``/readyz`` is 503, with the reason, while the planner cannot decide
(e.g. Redis is unreachable; it keeps retrying, ``Planner.start``). SIGTERM/SIGINT stop it after
the current decision.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from distrs.actuators.base import Actuator
from distrs.config import PlannerSettings, SessionSettings
from distrs.core.pipeline_config import load_pipelines
from distrs.metrics import Metrics, SessionMetrics
from distrs.planner.loop import Planner
from distrs.planner.sessions import POOL, SessionPoolPlanner
from distrs.store.base import QueueStore
from distrs.store.factory import create_store
from distrs.store.sessions import SessionStore, create_session_store

log = logging.getLogger(__name__)


def busy_from(store: QueueStore, clock: Any, sessions: SessionStore | None = None) -> Any:
    """Worker ids a scale-down should spare: those holding a lease, and for the session pool
    those holding a session (its state lives in them)."""

    async def busy(stage: str) -> set[str]:
        if stage == POOL and sessions is not None:
            stats = await sessions.stats(clock())
            return {w for w, n in stats.open_by_worker.items() if n > 0}
        snap = await store.snapshot(clock())
        return set(snap.busy_workers.get(stage, []))

    return busy


def build_actuator(
    settings: PlannerSettings,
    store: QueueStore,
    metrics: Metrics,
    stages: list[str],
    proxy_url: str | None,
    sessions: SessionStore | None = None,
) -> Actuator:
    import time

    if settings.actuator == "kubernetes":
        from distrs.actuators.kubernetes import create_kubernetes_actuator

        pools = [*stages, POOL] if sessions is not None else stages
        return create_kubernetes_actuator(
            settings, pools, busy_workers=busy_from(store, time.time, sessions), metrics=metrics
        )
    if settings.actuator == "local":
        from distrs.actuators.local import LocalActuator

        url = proxy_url or settings.proxy_url
        if not url:
            raise SystemExit("the local actuator needs --proxy URL (or DISTRS_PROXY_URL) for its workers")
        commands = {POOL: ["session-worker"]} if sessions is not None else {}
        return LocalActuator(proxy_url=url, max_per_stage=settings.max_replicas, commands=commands)
    raise SystemExit(f"unknown actuator {settings.actuator!r}: use local or kubernetes")


def serve_probes(port: int, metrics: Metrics, planner: dict[str, Planner]) -> ThreadingHTTPServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` (``planner["p"].ready``) on ``port``, in a thread.

    The standard library's server is enough for three tiny read-only pages scraped every few
    seconds, and keeps the probes answering while the event loop is busy deciding."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._send(200, b'{"status": "ok"}', "application/json")
            elif path == "/readyz":
                p = planner.get("p")
                ok = p is not None and p.ready
                reason = "starting" if p is None else p.not_ready
                body = {"status": "ok"} if ok else {"status": "unavailable", "reason": reason}
                self._send(200 if ok else 503, json.dumps(body).encode(), "application/json")
            else:
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:  # probes every few seconds: no access log
            return

    server = ThreadingHTTPServer(("", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="planner-probes", daemon=True).start()
    return server


def run_planner(
    redis_url: str | None = None,
    redis_mode: str | None = None,
    policy: str | None = None,
    actuator: str | None = None,
    proxy_url: str | None = None,
    pipelines_file: str | None = None,
) -> None:
    overrides: dict[str, Any] = {
        k: v
        for k, v in dict(
            redis_url=redis_url, redis_mode=redis_mode, policy=policy, actuator=actuator, proxy_url=proxy_url
        ).items()
        if v
    }
    settings = PlannerSettings(**overrides)
    if not settings.redis_url:
        raise SystemExit(
            "distrs planner needs a shared store: --redis URL or DISTRS_REDIS_URL "
            "(the memory store lives inside one process; use `distrs up` for that)"
        )
    table = load_pipelines(pipelines_file or settings.pipelines_file)
    metrics = Metrics(tenant_labels=settings.metrics_tenant_labels)
    holder: dict[str, Planner] = {}
    probes = serve_probes(settings.metrics_port, metrics, holder)
    store = create_store(settings)
    session_settings = SessionSettings()
    sessions = create_session_store(settings) if session_settings.enabled else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await store.start()
        act = build_actuator(settings, store, metrics, list(table.stages), proxy_url, sessions)
        holder["p"] = Planner(store, act, table, settings, metrics=metrics)
        pool = None
        if sessions is not None:  # the session-worker pool, sized from the session store
            await sessions.start()
            planner = SessionPoolPlanner(sessions, act, session_settings, SessionMetrics(metrics.registry))
            pool = asyncio.create_task(planner.run(stop))
        try:
            await holder["p"].run(stop)
        finally:
            if pool is not None:
                await pool
                assert sessions is not None
                await sessions.close()
            await act.close()
            await store.close()

    try:
        asyncio.run(main())
    finally:
        probes.shutdown()
