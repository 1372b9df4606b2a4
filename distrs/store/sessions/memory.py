"""The in-process SessionStore (one proxy process: ``distrs up``, tests).

Plain dicts and deques under the event loop (every method runs to completion without awaiting
in between, so each is atomic); waiters park on ``store/notify.py`` keys: an op id for a call's
answer, a worker id for its queue (creates wake every worker with room). The semantics are the
protocol's (``base.py``), checked by the same conformance suite as the Redis store.
"""

from __future__ import annotations

from collections import deque

from distrs.core.sessions import (
    EndReason,
    OpKind,
    OpState,
    SessionOp,
    SessionRecord,
    SessionState,
    WorkerView,
    ended_answer,
    expiry,
    op_deadline,
)
from distrs.store.notify import Notifier
from distrs.store.sessions.base import (
    Completed,
    OpConflict,
    OpDone,
    SessionEnded,
    SessionNotFound,
    SessionQuotaExceeded,
    SessionStats,
    SweepReport,
)


def ended_error(rec: SessionRecord) -> dict[str, object]:
    """The error a call of an ended session is answered with."""
    status, code, message = ended_answer(rec.end_reason)
    return {"status": status, "code": code, "message": message}


class MemorySessionStore:
    def __init__(self) -> None:
        self._recs: dict[str, SessionRecord] = {}
        self._ops: dict[str, SessionOp] = {}
        self._pending: dict[str, list[str]] = {}  # session -> its ops not done, in order
        self._queues: dict[str, deque[str]] = {}  # worker -> op ids
        self._creates: deque[str] = deque()
        self._workers: dict[str, WorkerView] = {}
        self._held: dict[str, set[str]] = {}  # worker -> its sessions not closed
        self._tenants: dict[str, set[str]] = {}  # tenant -> its sessions not closed
        self._wake = Notifier()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # trainer side -----------------------------------------------------------------------------
    async def create(self, rec: SessionRecord, op: SessionOp, now: float, max_open: int | None) -> SessionOp:
        mine = self._tenants.setdefault(rec.tenant, set())
        if max_open is not None and len(mine) >= max_open:
            raise SessionQuotaExceeded(
                f"tenant {rec.tenant!r} has {len(mine)} open sessions (its quota is {max_open})",
                max_open=max_open,
            )
        rec = rec.model_copy(update={"busy": 1})
        self._recs[rec.session_id] = rec
        self._ops[op.op_id] = op
        self._pending[rec.session_id] = [op.op_id]
        self._creates.append(op.op_id)
        mine.add(rec.session_id)
        for w in self._workers.values():
            if not w.draining:
                self._wake.notify(w.worker_id)
        return op

    async def get(self, session_id: str) -> SessionRecord | None:
        rec = self._recs.get(session_id)
        return None if rec is None else rec.model_copy()

    async def submit(self, op: SessionOp, now: float) -> SessionOp:
        rec = self._recs.get(op.session_id)
        if rec is None:
            raise SessionNotFound(f"session {op.session_id!r} not found", session_id=op.session_id)
        known = self._ops.get(op.op_id)
        if known is not None:
            if known.kind != op.kind or known.body != op.body:
                raise OpConflict(f"exec_id {op.op_id!r} was used for another call", field="exec_id")
            return known.model_copy()
        if rec.state is SessionState.CLOSED:
            raise SessionEnded(rec)
        rec.busy += 1
        rec.last_used_at = now
        self._ops[op.op_id] = op
        self._pending.setdefault(rec.session_id, []).append(op.op_id)
        if rec.worker_id is not None:
            self._queues.setdefault(rec.worker_id, deque()).append(op.op_id)
            self._wake.notify(rec.worker_id)
        return op.model_copy()

    async def get_op(self, op_id: str) -> SessionOp | None:
        op = self._ops.get(op_id)
        return None if op is None else op.model_copy()

    async def wait_op(self, op_id: str, timeout_s: float) -> None:
        op = self._ops.get(op_id)
        if op is None or op.done:
            return
        await self._wake.wait(("op", op_id), timeout_s)

    # worker side ------------------------------------------------------------------------------
    async def poll(self, worker: WorkerView, now: float, max_ops: int, grace_s: float) -> list[SessionOp]:
        self._workers[worker.worker_id] = worker
        held = self._held.setdefault(worker.worker_id, set())
        out: list[SessionOp] = []
        q = self._queues.setdefault(worker.worker_id, deque())
        while q and len(out) < max_ops:
            op = self._ops.get(q.popleft())
            if op is not None and op.state is OpState.QUEUED:
                out.append(self._take(op, worker, now, grace_s))
        room = worker.capacity - len(held)
        while not worker.draining and room > 0 and self._creates and len(out) < max_ops:
            op = self._ops.get(self._creates.popleft())
            if op is None or op.state is not OpState.QUEUED:
                continue
            rec = self._recs[op.session_id]
            rec.worker_id, rec.holder = worker.worker_id, worker.holder
            held.add(rec.session_id)
            room -= 1
            out.append(self._take(op, worker, now, grace_s))
            for later in self._pending.get(rec.session_id, [])[1:]:  # calls made while it opened
                q.append(later)
        return out

    def _take(self, op: SessionOp, worker: WorkerView, now: float, grace_s: float) -> SessionOp:
        op.state = OpState.RUNNING
        op.worker_id, op.holder, op.started_at = worker.worker_id, worker.holder, now
        op.deadline = op_deadline(op.kind, op.body, now, grace_s)
        return op.model_copy()

    async def wait_for_ops(self, worker_id: str, timeout_s: float) -> None:
        if self._queues.get(worker_id):
            return
        await self._wake.wait(worker_id, timeout_s)

    async def complete(self, holder: str, items: list[OpDone], now: float) -> list[Completed]:
        return [self._complete_one(holder, item, now) for item in items]

    def _complete_one(self, holder: str, item: OpDone, now: float) -> Completed:
        op = self._ops.get(item.op_id)
        if op is None or op.state is not OpState.RUNNING:
            return Completed(op_id=item.op_id, error="unknown_op")
        if op.holder != holder:
            return Completed(op_id=item.op_id, error="op_not_yours")
        op.state, op.result, op.error = OpState.DONE, item.result, item.error
        self._wake.notify(("op", op.op_id))
        rec = self._recs.get(op.session_id)
        if rec is None:
            return Completed(op_id=item.op_id, close=True)
        self._settle(rec, op.op_id)
        if op.kind is not OpKind.CLOSE:
            rec.last_used_at = now
        if op.kind is OpKind.EXEC:
            rec.execs += 1
        rec.restarts = int(item.session.get("restarts", rec.restarts))
        rec.cpu_total_s = float(item.session.get("cpu_total_s", rec.cpu_total_s))
        ended = item.session.get("ended")
        if op.kind is OpKind.CREATE:
            if rec.state is SessionState.CLOSED:
                return Completed(op_id=item.op_id, close=True)  # given up meanwhile: close it
            if item.error is not None:
                rec.detail = str(item.error.get("message", ""))[:500]
                self._end(rec, EndReason.CREATE_FAILED, now, close=False)
                return Completed(op_id=item.op_id)
            rec.state, rec.opened_at = SessionState.OPEN, now
        if ended and rec.state is not SessionState.CLOSED:
            reason = EndReason(ended) if ended in EndReason._value2member_map_ else EndReason.LOST
            self._end(rec, reason, now, close=False)  # the worker has closed it already
        return Completed(
            op_id=item.op_id, close=rec.state is SessionState.CLOSED and op.kind is OpKind.CREATE
        )

    def _settle(self, rec: SessionRecord, op_id: str) -> None:
        pending = self._pending.get(rec.session_id, [])
        if op_id in pending:
            pending.remove(op_id)
            rec.busy = max(0, rec.busy - 1)

    # ending -----------------------------------------------------------------------------------
    async def end(self, session_id: str, reason: EndReason, now: float) -> SessionRecord | None:
        rec = self._recs.get(session_id)
        if rec is None:
            return None
        if rec.state is not SessionState.CLOSED:
            self._end(rec, reason, now, close=True)
        return rec.model_copy()

    def _end(
        self, rec: SessionRecord, reason: EndReason, now: float, *, close: bool, running: bool = False
    ) -> None:
        """Close ``rec``: its queued calls (and with ``running`` its running ones) are answered
        with the reason; with ``close`` its worker is sent a close call."""
        rec.state, rec.end_reason, rec.ended_at = SessionState.CLOSED, reason, now
        self._tenants.get(rec.tenant, set()).discard(rec.session_id)
        error = ended_error(rec)
        for op_id in list(self._pending.get(rec.session_id, [])):
            op = self._ops.get(op_id)
            if op is None or op.state is OpState.DONE:
                continue
            if op.state is OpState.QUEUED or running:
                op.state, op.error = OpState.DONE, dict(error)
                self._settle(rec, op_id)
                self._wake.notify(("op", op_id))
        worker = rec.worker_id
        if worker is None:
            return
        self._held.get(worker, set()).discard(rec.session_id)
        if close and worker in self._workers:
            op = SessionOp(
                op_id=f"{rec.session_id}.close", session_id=rec.session_id, kind=OpKind.CLOSE, created_at=now
            )
            self._ops[op.op_id] = op
            self._queues.setdefault(worker, deque()).append(op.op_id)
            self._wake.notify(worker)

    async def sweep(
        self, now: float, worker_ttl_s: float, create_timeout_s: float, closed_ttl_s: float
    ) -> SweepReport:
        report = SweepReport()
        for wid, w in list(self._workers.items()):
            if now - w.seen_at > worker_ttl_s:
                for sid in list(self._held.get(wid, ())):
                    rec = self._recs.get(sid)
                    if rec is not None and rec.state is not SessionState.CLOSED:
                        self._end(rec, EndReason.LOST, now, close=False, running=True)
                        report.add(EndReason.LOST)
                del self._workers[wid]
                self._held.pop(wid, None)
                self._queues.pop(wid, None)
                report.workers_lost.append(wid)
        for rec in list(self._recs.values()):
            reason = expiry(rec, now)
            if reason is not None:
                self._end(rec, reason, now, close=True)
                report.add(reason)
        for op in list(self._ops.values()):
            rec = self._recs.get(op.session_id)
            if rec is None or rec.state is SessionState.CLOSED:
                continue
            if op.state is OpState.RUNNING and op.deadline is not None and now > op.deadline:
                self._end(rec, EndReason.LOST, now, close=True, running=True)  # its worker lost it
                report.add(EndReason.LOST)
            elif (
                op.kind is OpKind.CREATE
                and op.state is OpState.QUEUED
                and now - op.created_at > create_timeout_s
            ):
                self._end(rec, EndReason.CREATE_TIMEOUT, now, close=False)
                report.add(EndReason.CREATE_TIMEOUT)
        self._forget(now, closed_ttl_s)
        return report

    def _forget(self, now: float, closed_ttl_s: float) -> None:
        """Drop ended sessions (and their calls) after ``closed_ttl_s``, and calls answered that
        long ago: until then a repeated call still gets its answer, a later one 404."""
        for sid, rec in list(self._recs.items()):
            if rec.ended_at is not None and now - rec.ended_at > closed_ttl_s:
                del self._recs[sid]
                self._pending.pop(sid, None)
        for op_id, op in list(self._ops.items()):
            gone = op.session_id not in self._recs
            if gone or (op.done and now - (op.started_at or op.created_at) > closed_ttl_s):
                del self._ops[op_id]

    # views ------------------------------------------------------------------------------------
    async def stats(self, now: float) -> SessionStats:
        s = SessionStats(workers=[w.model_copy() for w in self._workers.values()])
        for rec in self._recs.values():
            if rec.state is SessionState.OPENING:
                s.opening += 1
            elif rec.state is SessionState.OPEN:
                s.open += 1
            if rec.state is SessionState.OPEN and rec.busy > 0:
                s.busy_sessions += 1
        for op in self._ops.values():
            if op.kind is OpKind.CREATE:
                s.creates_queued += op.state is OpState.QUEUED
            elif op.state is OpState.QUEUED:
                s.ops_queued += 1
            elif op.state is OpState.RUNNING:
                s.ops_running += 1
        s.open_by_worker = {w: len(sids) for w, sids in self._held.items()}
        return s

    async def tenant_open(self, tenant: str) -> int:
        return len(self._tenants.get(tenant, ()))
