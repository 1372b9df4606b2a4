"""Which stages a request visits, in order.

Most reward types visit every stage of their pipeline; a stage handler may still end a request
early (e.g. a compile error). A type whose descriptor has a route hook visits the stages the hook
picks for the payload (``synthetic`` skips the stages its payload gives no time, so a trace's
compile-only failures never queue for a GPU): ``RewardType.visits``.
"""

from __future__ import annotations

from typing import Any

from distrs.core.stages import PipelineTable


def route(table: PipelineTable, reward_type: str, payload: dict[str, Any]) -> list[str]:
    """The ordered stages for this request; KeyError for an unknown reward type."""
    return table.reward_types[reward_type].visits(payload)


def next_stage(table: PipelineTable, reward_type: str, payload: dict[str, Any], stage: str) -> str | None:
    """The stage after ``stage`` on this request's route, or None at the end."""
    r = route(table, reward_type, payload)
    if stage not in r:
        return None
    i = r.index(stage)
    return r[i + 1] if i + 1 < len(r) else None
