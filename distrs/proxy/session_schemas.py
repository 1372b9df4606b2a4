"""HTTP bodies of the session API (docs/sessions.md). Unknown fields are rejected (422 naming
them), as everywhere in API v1; ids follow the one id rule (``schemas.ID_PATTERN``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from distrs.core.sessions import Language, SessionLimits
from distrs.proxy.schemas import ID_PATTERN


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileIn(_Strict):
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"


class SessionCreate(_Strict):
    task: str = Field(pattern=ID_PATTERN, description="Training task (tenant-scoped) the session belongs to.")
    language: Language = Field(description="python (a REPL: globals kept) or bash (a shell: cwd, env kept).")
    files: dict[str, str | FileIn] = Field(
        default_factory=dict,
        description="Files put into the work dir before the first exec: path -> UTF-8 text, or "
        '{"content", "encoding": "utf-8"|"base64"}.',
    )
    idle_timeout_s: float | None = Field(
        None, gt=0, description="End the session after this long without a call."
    )
    max_lifetime_s: float | None = Field(
        None, gt=0, description="End the session this long after it was created."
    )
    limits: SessionLimits | None = Field(None, description="Limits over the whole session.")


class FilesIn(_Strict):
    files: dict[str, str | FileIn] = Field(
        min_length=1, description="path -> UTF-8 text or {content, encoding}."
    )


class ExecIn(_Strict):
    code: str = Field(description="Python source (a cell) or a bash script.")
    timeout_s: float | None = Field(None, gt=0, description="Wall time after which the exec is cut.")
    stdin: str = Field("", description="Standard input of the exec.")
    exec_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_:@+=-]{1,100}$",
        description="Idempotency key: a retried exec with the same id is answered, never run twice.",
    )


class SessionTest(_Strict):
    code: str
    stdin: str = ""
    expected_stdout: str | None = Field(None, description="Compared after trimming trailing whitespace.")


class TestsPayload(_Strict):
    tests: list[SessionTest] = Field(min_length=1, max_length=256)
    scoring: Literal["fraction", "all"] = "fraction"
    timeout_s: float | None = Field(None, gt=0, description="Per test.")


class RewardIn(_Strict):
    reward_type: Literal["tests"] = Field(
        description="tests: run each test's code in a copy of the session's state (its own "
        "changes are not kept); it passes when it raises nothing (python) or exits 0 (bash) and "
        "prints expected_stdout where given."
    )
    payload: dict[str, Any]


class ExecResult(BaseModel):
    """What one exec answers."""

    stdout: str
    stderr: str
    value: str | None = Field(
        description="python: the repr of the cell's trailing expression, as Jupyter shows it."
    )
    error: dict[str, Any] | None = Field(
        description="{type, message, traceback} of an exception, a cut or a restart."
    )
    exit_code: int | None = Field(description="bash: the script's status (python: None).")
    duration_s: float
    timed_out: bool = False
    state_survived: bool = Field(
        True, description="False on the exec whose interpreter was killed and restarted, and on the next one."
    )
    restarts: int = 0
    cpu_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False


class SessionInfo(BaseModel):
    """A session as POST /v1/sessions and GET /v1/sessions/{id} show it."""

    session_id: str
    task: str
    language: Language
    state: Literal["opening", "open"]
    created_at: float
    last_used_at: float
    idle_timeout_s: float
    max_lifetime_s: float
    expires_at: float = Field(description="When it ends unless used again (or at the end of its lifetime).")
    limits: SessionLimits
    execs: int
    restarts: int
    cpu_total_s: float
    busy: bool
    kernel: dict[str, Any] | None = Field(
        None, description="GET only: the interpreter's view (python: globals; bash: cwd), restarts, CPU."
    )


class RewardOut(BaseModel):
    status: Literal["ok", "wrong_answer", "timeout"]
    score: float
    detail: dict[str, Any] = Field(description="{passed, total, tests: [{passed, stdout, error, exit_code}]}")


class PollIn(_Strict):
    worker_id: str = Field(pattern=ID_PATTERN)
    capacity: int = Field(ge=0, le=100_000, description="Sessions this worker may hold.")
    open: int = Field(0, ge=0, description="Sessions it holds.")
    spares: int = Field(0, ge=0, description="Jails it opened ahead of creates.")
    draining: bool = Field(False, description="Takes no new session (finishes those it holds).")
    wait_s: float = Field(0.0, ge=0, le=300)
    max_ops: int = Field(16, ge=0, le=1000)


class OpReport(_Strict):
    op_id: str = Field(pattern=ID_PATTERN)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    session: dict[str, Any] = Field(default_factory=dict)


class CompleteIn(_Strict):
    worker_id: str = Field(pattern=ID_PATTERN)
    items: list[OpReport] = Field(max_length=1000)


class ReleaseIn(_Strict):
    worker_id: str = Field(pattern=ID_PATTERN)
    sessions: list[str] = Field(max_length=100_000)
