"""Stage handlers: what a worker runs for one request at one stage, and what every handler uses.

A handler is looked up by (reward type, stage) in ``registry.py`` (from the reward type's
descriptor) so a worker process for the ``compile`` stage can serve both ``cuda`` and ``cpp``
requests. Handlers are synchronous (they mostly wait on a sandboxed child process); the worker
runs them in a thread.

A handler never blames the model for its own failure: an exception escaping ``run`` becomes
``internal_error`` in the worker, and sandbox failures map to ``internal_error`` too.

Besides the contract, the few pieces every reward type uses live here: :class:`InvalidPayload`
(the trainer's mistake, ended ``invalid`` naming the field), :func:`stage_budget` (the time a
handler may spend), :func:`snippet` (output cut for a result) and the encoding of binary
artifacts with their size limit.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Protocol

from distrs.core.model import Status

MiB = 1 << 20
SNIPPET_CHARS = 400
# Artifacts travel base64-encoded; 16 MiB is the proxy's limit per lease.
MAX_BINARY_BYTES = 11 * MiB


@dataclass(frozen=True)
class StageInput:
    """One request at one stage, as a worker hands it to a handler."""

    request_id: str
    task: str
    reward_type: str
    stage: str
    payload: dict[str, Any]
    artifacts: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0


@dataclass(frozen=True)
class StageOutput:
    """``outcome="next"`` sends the request on with ``artifacts``; ``"final"`` ends it."""

    outcome: str
    status: Status | None = None
    score: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def next(artifacts: dict[str, str] | None = None) -> StageOutput:
        return StageOutput(outcome="next", artifacts=artifacts or {})

    @staticmethod
    def final(status: Status, score: float = 0.0, **detail: Any) -> StageOutput:
        return StageOutput(outcome="final", status=status, score=score, detail=detail)


class StageHandler(Protocol):
    """Runs one stage of one reward type."""

    def ready(self) -> tuple[bool, str]:
        """Whether this worker can serve requests now, and why not (e.g. no GPU)."""
        ...

    def run(self, inp: StageInput) -> StageOutput: ...

    # Optional: ``absent() -> str | None``, what this worker's install lacks to serve the type at
    # all (a compiler not in the image), known at start. A worker serving every type of its stage
    # by default leaves such a type out and logs why, rather than being unready for all of them;
    # a worker told to serve the type stays unready (``ready``) and says so.


class InvalidPayload(ValueError):
    """The payload is malformed; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def output(self) -> StageOutput:
        return StageOutput.final(Status.INVALID, 0.0, error={"field": self.field, "message": self.message})


def stage_budget(inp: StageInput) -> float:
    """Time the handler may spend: the stage timeout less a small margin for reporting."""
    return budget_of(inp.timeout_s)


def budget_of(stage_timeout_s: float) -> float:
    """:func:`stage_budget` of a stage with this timeout."""
    return max(0.5, stage_timeout_s * 0.95 - 0.25)


def snippet(data: bytes | str, limit: int = SNIPPET_CHARS) -> str:
    """``data`` as text, cut to ``limit`` characters with a note of how many more there were."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def encode_binary(data: bytes) -> str:
    """A binary artifact as it travels (base64)."""
    return base64.b64encode(data).decode("ascii")


def decode_binary(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)
