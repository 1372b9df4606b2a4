"""Stateful sessions as records and rules: what a session and one call on it are, when a session
ends by itself, and what a caller is told about an ended one.

A session (docs/sessions.md) is a jailed interpreter that keeps its state between calls and lives
in one worker's memory. The store keeps a :class:`SessionRecord` per session and a
:class:`SessionOp` per call on it (create, exec, files, reward, close); the worker that holds the
session runs the calls. These are pure types and functions (no I/O, time passed in as ``now``),
shared by the store, the proxy, the worker and the planner.

An ended session is never answered with a fresh empty state: every later call gets the reason it
ended (:func:`ended_answer`): 404 once deleted, 410 once expired, lost, over a limit or drained.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MiB = 1 << 20
JAIL_WORKDIR = "/jail/work"  # the session's work dir as its programs see it (sandbox/jail.py)


class Language(StrEnum):
    PYTHON = "python"
    BASH = "bash"


class SessionState(StrEnum):
    OPENING = "opening"  # its create is queued or running on a worker
    OPEN = "open"
    CLOSED = "closed"


class EndReason(StrEnum):
    """Why a session ended; each has its own answer (``ended_answer``)."""

    DELETED = "deleted"
    IDLE = "idle_timeout"
    LIFETIME = "max_lifetime"
    LOST = "lost"  # its worker died (or stopped answering for it): its state is gone
    LIMIT = "limit_exceeded"  # its total CPU time
    DRAINED = "drained"  # its worker was stopped before the session was closed
    CREATE_FAILED = "create_failed"
    CREATE_TIMEOUT = "create_timeout"  # no worker took it in time


class OpKind(StrEnum):
    CREATE = "create"
    EXEC = "exec"
    TEST = "test"  # code run in a copy of the session's state (rewards)
    STATE = "state"
    FILES_READ = "files_read"
    FILES_WRITE = "files_write"
    FILES_LIST = "files_list"
    CLOSE = "close"


class OpState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class SessionLimits(BaseModel):
    """Limits held over the whole session (a caller's ask, bounded by the service's maxima)."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(512, ge=32, description="Memory of every process of the session together.")
    disk_mb: int = Field(256, ge=1, description="Size of the session's files (work dir and /tmp).")
    max_processes: int = Field(64, ge=4, description="Processes the session may have at once.")
    exec_cpu_s: float = Field(60.0, gt=0, description="CPU seconds one exec may use.")
    total_cpu_s: float = Field(3600.0, gt=0, description="CPU seconds the session may use in all.")
    output_bytes: int = Field(1 * MiB, ge=1024, description="Kept of stdout and of stderr per exec.")


class SessionRecord(BaseModel):
    """What the store keeps about one session."""

    session_id: str
    tenant: str
    task: str  # tenant-scoped (``TENANT/TASK``), as request tasks are
    language: Language
    state: SessionState = SessionState.OPENING
    end_reason: EndReason | None = None
    detail: str = ""  # why a create failed, say
    worker_id: str | None = None
    holder: str | None = None  # the credential of the worker that holds it
    created_at: float
    opened_at: float | None = None
    last_used_at: float
    ended_at: float | None = None
    idle_timeout_s: float
    max_lifetime_s: float
    limits: SessionLimits = Field(default_factory=SessionLimits)
    busy: int = 0  # its calls queued or running
    execs: int = 0
    restarts: int = 0
    cpu_total_s: float = 0.0

    def view(self, public_task: str) -> dict[str, Any]:
        """The session as ``GET /v1/sessions/{id}`` shows it."""
        return {
            "session_id": self.session_id,
            "task": public_task,
            "language": self.language.value,
            "state": self.state.value,
            "end_reason": self.end_reason.value if self.end_reason else None,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "idle_timeout_s": self.idle_timeout_s,
            "max_lifetime_s": self.max_lifetime_s,
            "expires_at": min(self.last_used_at + self.idle_timeout_s, self.created_at + self.max_lifetime_s),
            "limits": self.limits.model_dump(),
            "execs": self.execs,
            "restarts": self.restarts,
            "cpu_total_s": self.cpu_total_s,
            "busy": self.busy > 0,
        }


class SessionOp(BaseModel):
    """One call on a session, from the proxy to the worker that holds the session and back."""

    op_id: str
    session_id: str
    kind: OpKind
    body: dict[str, Any] = Field(default_factory=dict)
    state: OpState = OpState.QUEUED
    worker_id: str | None = None
    holder: str | None = None
    created_at: float
    started_at: float | None = None
    deadline: float | None = None  # by when a running op must be reported
    result: dict[str, Any] | None = None
    # set instead of ``result`` when the call could not run: {"code", "message"}
    error: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.state is OpState.DONE


class WorkerView(BaseModel):
    """A session worker as the store sees it (its latest poll)."""

    worker_id: str
    holder: str
    capacity: int  # sessions it may hold
    open: int = 0  # sessions it holds
    spares: int = 0  # jails it opened ahead of creates
    draining: bool = False
    seen_at: float


def ended_answer(reason: EndReason | None) -> tuple[int, str, str]:
    """(HTTP status, error code, message) for a call on a session that ended for ``reason``."""
    if reason is EndReason.DELETED:
        return 404, "session_deleted", "the session was deleted"
    if reason in (EndReason.IDLE, EndReason.LIFETIME):
        what = "idle_timeout_s" if reason is EndReason.IDLE else "max_lifetime_s"
        return 410, "session_expired", f"the session expired ({what}); its state is gone"
    if reason in (EndReason.LOST, EndReason.DRAINED):
        return 410, "session_lost", "the session's worker stopped; its state is gone"
    if reason is EndReason.LIMIT:
        return 410, "session_limit_exceeded", "the session used up its total_cpu_s and was ended"
    return 410, "session_create_failed", "the session could not be created"


def expiry(rec: SessionRecord, now: float) -> EndReason | None:
    """Whether an open (or opening) session has expired at ``now``: its lifetime is over (even in
    use: the running call finishes first, the worker runs a session's calls in order), or it has
    been idle (no call queued or running) for ``idle_timeout_s``."""
    if rec.state is SessionState.CLOSED:
        return None
    if now - rec.created_at > rec.max_lifetime_s:
        return EndReason.LIFETIME
    if rec.busy == 0 and now - rec.last_used_at > rec.idle_timeout_s:
        return EndReason.IDLE
    return None


def op_deadline(kind: OpKind, body: dict[str, Any], started_at: float, grace_s: float) -> float:
    """By when a running op must be reported: an exec's own ``timeout_s`` plus ``grace_s`` (the
    interrupt, the kill and the report), other calls ``grace_s``."""
    run = float(body.get("timeout_s") or 0.0) if kind in (OpKind.EXEC, OpKind.TEST) else 0.0
    if kind is OpKind.TEST:
        run *= max(1, len(body.get("tests") or [1]))
    return started_at + run + grace_s


def work_path(path: str) -> str:
    """``path`` (relative to the session's work dir, or absolute under ``/jail/work``) as a
    relative path of plain components; ValueError for anything else (``..``, other roots)."""
    rel = path[len(JAIL_WORKDIR) + 1 :] if path.startswith(JAIL_WORKDIR + "/") else path
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")) or "\0" in rel:
        raise ValueError(f"path must be relative to the work dir (or under {JAIL_WORKDIR}/): {path!r}")
    return rel
