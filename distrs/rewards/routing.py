"""Which stages a request visits, in order: its route, decided once, when it is submitted.

Most reward types visit every stage of their pipeline; a stage handler may still end a request
early (e.g. a compile error). A type whose descriptor has a route hook visits the stages the hook
picks for the payload (``synthetic`` skips the stages its payload gives no time, so a trace's
compile-only failures never queue for a GPU): ``RewardType.visits``. The store keeps the route
with the request, and a completion with outcome ``next`` moves it on along that route
(store/base.py): nothing here is asked again after submit.
"""

from __future__ import annotations

from typing import Any

from distrs.core.stages import PipelineTable


def route(table: PipelineTable, reward_type: str, payload: dict[str, Any]) -> list[str]:
    """The ordered stages for this request; KeyError for an unknown reward type."""
    return table.reward_types[reward_type].visits(payload)
