"""Stage handlers: what a worker runs for one request at one stage.

A handler is looked up by (reward type, stage) in ``registry.py`` so a worker process for the
``compile`` stage can serve both ``cuda`` and ``cpp`` requests. Handlers are synchronous (they
mostly wait on a sandboxed child process); the worker runs them in a thread.

A handler never blames the model for its own failure: an exception escaping ``run`` becomes
``internal_error`` in the worker, and sandbox failures map to ``internal_error`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from distrs.core.model import Status


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


# What the registry (``distrs.rewards.registry``) holds per (reward type, stage).
HandlerFactory = Callable[[], StageHandler]
