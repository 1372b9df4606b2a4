"""The proxy's side of stateful sessions: the store, the sweeper, and how a call is made.

Every call on a session (exec, files, state, reward) becomes a :class:`SessionOp` submitted to the
session store, which queues it for the worker holding the session (``store/sessions/base.py``:
affinity, leases, once-only completion, idempotent op ids); the route then waits for its answer
(``call``). The sweeper task ends sessions whose worker is gone (``session_lost``), that sat idle
or outlived their lifetime, whose call is overdue, or whose create no worker took, and sets the
session gauges. It runs in every proxy process; the store's transitions make concurrent sweeps
harmless.

``SessionService`` lives on ``app.state.sessions`` (None when sessions are off).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

from distrs.config import SessionSettings
from distrs.core.sessions import EndReason, OpKind, SessionOp, SessionRecord, SessionState
from distrs.metrics import SessionMetrics
from distrs.proxy.auth import Principal
from distrs.proxy.errors import ApiError
from distrs.store.errors import Unavailable
from distrs.store.sessions.base import SessionEnded, SessionNotFound, SessionStore

log = logging.getLogger(__name__)
RECLAIMED = {EndReason.IDLE, EndReason.LIFETIME, EndReason.LOST, EndReason.CREATE_TIMEOUT}


class SessionService:
    def __init__(
        self,
        settings: SessionSettings,
        store: SessionStore,
        metrics: SessionMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings, self.store, self.metrics, self.clock = settings, store, metrics, clock
        self._task: asyncio.Task[None] | None = None
        self.last_stats: dict[str, Any] = {}

    async def start(self) -> None:
        await self.store.start()
        self._task = asyncio.create_task(self._sweeper(), name="distrs-session-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.store.close()

    async def _sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_s)
            try:
                await self.sweep_once()
            except Unavailable as e:
                log.warning("session sweeper: store unavailable (%s); retrying", e)
            except Exception:
                log.exception("session sweeper failed; retrying")

    async def sweep_once(self) -> None:
        s = self.settings
        now = self.clock()
        report = await self.store.sweep(now, s.worker_ttl_s, s.create_wait_s, s.closed_ttl_s)
        for reason, n in report.ended.items():
            self.ended(EndReason(reason), n)
        if report.workers_lost:
            log.warning("session workers gone: %s (their sessions end session_lost)", report.workers_lost)
        stats = await self.store.stats(now)
        m = self.metrics
        m.open.labels("opening").set(stats.opening)
        m.open.labels("open").set(stats.open)
        m.calls.labels("queued").set(stats.ops_queued)
        m.calls.labels("running").set(stats.ops_running)
        for draining in (True, False):
            m.workers.labels(str(draining).lower()).set(sum(w.draining == draining for w in stats.workers))
        self.last_stats = stats.model_dump(mode="json")

    def ended(self, reason: EndReason, n: int = 1) -> None:
        self.metrics.ended.labels(reason.value).inc(n)
        if reason in RECLAIMED:
            self.metrics.reclaimed.labels(reason.value).inc(n)

    async def scoped(self, who: Principal, session_id: str, *, open_only: bool = True) -> SessionRecord:
        """The caller's session: 404 when unknown or another tenant's (never revealed), its end
        reason's answer when it ended (``open_only``)."""
        rec = await self.store.get(session_id)
        if rec is None or rec.tenant != who.tenant:
            raise SessionNotFound(f"session {session_id!r} not found", session_id=session_id)
        if open_only and rec.state is SessionState.CLOSED:
            raise SessionEnded(rec)
        return rec

    async def call(self, rec: SessionRecord, op: SessionOp, wait_s: float) -> SessionOp:
        """Submit ``op`` and wait up to ``wait_s`` for its answer; an answer that is an error
        (the session ended under it, say) is raised as that error."""
        sub = await self.store.submit(op, self.clock())
        done = sub if sub.done else await self.wait(op.op_id, wait_s)
        if done is None:
            raise ApiError(410, "session_lost", "the call was forgotten with its session")
        if not done.done:
            raise ApiError(
                504,
                "call_pending",
                f"no answer within {wait_s:g}s; repeat the call with the same exec_id to get it",
                op_id=op.op_id,
            )
        if done.error is not None:
            err = done.error
            raise ApiError(
                int(err.get("status", 500)),
                str(err.get("code", "internal_error")),
                str(err.get("message", "")),
            )
        return done

    async def wait(self, op_id: str, wait_s: float) -> SessionOp | None:
        """The op once done, or as it stands after ``wait_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            op = await self.store.get_op(op_id)
            if op is None or op.done:
                return op
            left = deadline - loop.time()
            if left <= 0:
                return op
            await self.store.wait_op(op_id, min(left, 5.0))

    def new_op(self, rec: SessionRecord, kind: OpKind, body: dict[str, Any], suffix: str) -> SessionOp:
        return SessionOp(
            op_id=f"{rec.session_id}.{suffix}",
            session_id=rec.session_id,
            kind=kind,
            body=body,
            created_at=self.clock(),
        )


def sessions_of(request: Request) -> SessionService:
    svc: SessionService | None = getattr(request.app.state, "sessions", None)
    if svc is None:
        raise ApiError(
            404, "sessions_disabled", "sessions are not enabled on this service (DISTRS_SESSION_ENABLED)"
        )
    return svc
