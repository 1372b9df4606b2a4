"""Plain data the client hands back: one reward result per request.

Kept as frozen dataclasses (not pydantic) so the client depends on httpx only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Final statuses the service reports (DESIGN.md, HTTP API v1).
STATUSES = ("ok", "wrong_answer", "compile_error", "runtime_error", "timeout", "invalid", "internal_error")


@dataclass(frozen=True)
class StageTiming:
    """Where a request spent its time at one stage."""

    name: str
    worker: str = ""
    queued_s: float = 0.0
    run_s: float = 0.0
    outcome: str = ""


@dataclass(frozen=True)
class RewardResult:
    """The final answer for one request.

    ``status`` is one of :data:`STATUSES`; ``score`` is in [0, 1] for the built-in reward types;
    ``detail`` carries type-specific information (e.g. tests passed, compiler output).
    """

    request_id: str
    status: str
    score: float
    detail: dict[str, Any] = field(default_factory=dict)
    stages: tuple[StageTiming, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @staticmethod
    def from_json(obj: dict[str, Any]) -> RewardResult:
        stages = tuple(
            StageTiming(
                name=str(s.get("name", "")),
                worker=str(s.get("worker", "")),
                queued_s=float(s.get("queued_s") or 0.0),
                run_s=float(s.get("run_s") or 0.0),
                outcome=str(s.get("outcome", "")),
            )
            for s in obj.get("stages") or ()
            if isinstance(s, dict)
        )
        detail = obj.get("detail")
        return RewardResult(
            request_id=str(obj["request_id"]),
            status=str(obj.get("status", "internal_error")),
            score=float(obj.get("score") or 0.0),
            detail=detail if isinstance(detail, dict) else {},
            stages=stages,
        )
