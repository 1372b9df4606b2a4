"""The SessionStore protocol: where sessions, the calls on them and the session workers are kept.

Kept apart from the request store (``store/base.py``): a session is not a request in a stage
queue but a jail pinned to one worker, and its calls must reach that worker. Two implementations
pass one conformance suite (tests/integration/store/test_session_store.py): ``memory`` (one
process) and ``redis`` (standalone and cluster; ``redis.py``).

Semantics every implementation keeps (times passed in as ``now``; nothing reads a clock):

* Affinity. ``create`` queues the session's create call on a shared queue; the first live,
  non-draining worker with room that ``poll`` s takes it and from then on holds the session:
  every later call of the session goes to that worker's own queue and only that worker's
  ``poll`` gets it, in the order the calls were submitted.
* Leases and fencing. ``poll`` hands each call out once, to one holder (the worker credential that
  polled), with a deadline (``op_deadline``); ``complete`` is accepted from that holder only and
  once: a second completion is refused (``UnknownOp``), so a late or duplicate report never
  overwrites the first.
* Idempotency. ``submit`` of an op id already known returns that op as it is (queued, running or
  done) and never queues it twice; the same id with another body is ``OpConflict``.
* No silent fresh state. A call on an ended session raises ``SessionEnded`` with the session's
  end reason (``core.sessions.ended_answer``); calls still queued when it ends are answered with
  that reason, never run.
* A worker whose polls stop for ``worker_ttl_s`` is gone: ``sweep`` ends its sessions ``lost`` and
  answers their calls in flight ``session_lost`` (their state lived in its memory). A call past its
  deadline whose worker still polls ends its session ``lost`` too, and the worker is told to close
  it. ``sweep`` also ends idle and over-age sessions (``core.sessions.expiry``) and creates no
  worker took within ``create_timeout_s``, and forgets ended sessions after ``closed_ttl_s``.
* Quotas. ``create`` refuses a tenant's session past ``max_open`` (opening and open count).
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from distrs.core.sessions import EndReason, SessionOp, SessionRecord, WorkerView, ended_answer
from distrs.store.errors import StoreError


class SessionNotFound(StoreError):
    status = 404
    code = "session_not_found"


class SessionEnded(StoreError):
    """A call on an ended session: its status and code say why (``ended_answer``)."""

    def __init__(self, rec: SessionRecord) -> None:
        status, code, message = ended_answer(rec.end_reason)
        super().__init__(message, session_id=rec.session_id, end_reason=rec.end_reason, detail=rec.detail)
        self.status, self.code, self.record = status, code, rec


class SessionQuotaExceeded(StoreError):
    status = 429
    code = "session_quota_exceeded"


class OpConflict(StoreError):
    status = 409
    code = "exec_id_conflict"


class UnknownOp(StoreError):
    status = 404
    code = "unknown_op"


class OpNotYours(StoreError):
    status = 403
    code = "op_not_yours"


class OpDone(BaseModel):
    """A worker's report of one call: its result, or an error when it could not run it."""

    op_id: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # what the call changed of the session: restarts, cpu_total_s, ended (an EndReason value)
    session: dict[str, Any] = Field(default_factory=dict)


class Completed(BaseModel):
    """The store's answer to one report: ``error`` when refused; ``close`` when the worker should
    end the session (it ended meanwhile: deleted, expired, or its create was given up)."""

    op_id: str
    error: str | None = None
    close: bool = False


class SweepReport(BaseModel):
    """What one ``sweep`` ended, by reason (EndReason values), and the workers it found gone."""

    ended: dict[str, int] = Field(default_factory=dict)
    workers_lost: list[str] = Field(default_factory=list)

    def add(self, reason: EndReason, n: int = 1) -> None:
        self.ended[reason.value] = self.ended.get(reason.value, 0) + n


class SessionStats(BaseModel):
    """The session pool's live state, for the planner and the metrics."""

    opening: int = 0  # creates no worker has finished yet (queued or running)
    creates_queued: int = 0  # creates no worker has taken yet
    open: int = 0
    ops_queued: int = 0  # calls other than creates waiting for their worker
    ops_running: int = 0
    busy_sessions: int = 0  # open sessions with a call queued or running (creates not counted)
    workers: list[WorkerView] = Field(default_factory=list)
    open_by_worker: dict[str, int] = Field(default_factory=dict)


class SessionStore(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def create(self, rec: SessionRecord, op: SessionOp, now: float, max_open: int | None) -> SessionOp:
        """Keep ``rec`` (opening) and queue its create ``op`` for any worker with room;
        SessionQuotaExceeded past ``max_open`` sessions of the tenant (None: no quota)."""
        ...

    async def get(self, session_id: str) -> SessionRecord | None: ...

    async def submit(self, op: SessionOp, now: float) -> SessionOp:
        """Queue ``op`` for the worker that holds its session (see the module docstring);
        SessionNotFound, SessionEnded, OpConflict."""
        ...

    async def get_op(self, op_id: str) -> SessionOp | None: ...

    async def wait_op(self, op_id: str, timeout_s: float) -> None:
        """Return when ``op_id`` may be done (or after ``timeout_s``)."""
        ...

    async def poll(self, worker: WorkerView, now: float, max_ops: int, grace_s: float) -> list[SessionOp]:
        """Record the worker as alive (``worker.seen_at``) and hand it up to ``max_ops`` calls:
        its sessions' first, then creates while it has room and is not draining. Never blocks."""
        ...

    async def wait_for_ops(self, worker_id: str, timeout_s: float) -> None:
        """Return when a call for ``worker_id`` (or a create) may have been queued."""
        ...

    async def complete(self, holder: str, items: list[OpDone], now: float) -> list[Completed]:
        """Record the reports of calls ``holder`` took; one refused report never keeps the others."""
        ...

    async def end(self, session_id: str, reason: EndReason, now: float) -> SessionRecord | None:
        """End the session (idempotent: an ended one is returned as it is); its queued calls are
        answered with the reason and its worker is told to close it. None when unknown."""
        ...

    async def sweep(
        self, now: float, worker_ttl_s: float, create_timeout_s: float, closed_ttl_s: float
    ) -> SweepReport: ...

    async def stats(self, now: float) -> SessionStats: ...

    async def tenant_open(self, tenant: str) -> int: ...
