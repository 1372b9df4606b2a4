"""Which stages a request visits, in order: its route, decided once, when it is submitted.

Most reward types visit every stage of their pipeline; a stage handler may still end a request
early (e.g. a compile error). ``synthetic`` requests skip the stages their payload gives no time,
so a trace's compile-only failures never queue for a GPU. The store keeps the route with the
request, and a completion with outcome ``next`` moves it on along that route (store/base.py):
nothing here is asked again after submit.
"""

from __future__ import annotations

from typing import Any

from distrs.core.stages import PipelineTable
from distrs.rewards.synthetic import SYNTHETIC_STAGES, synthetic_route


def route(table: PipelineTable, reward_type: str, payload: dict[str, Any]) -> list[str]:
    """The ordered stages for this request; KeyError for an unknown reward type."""
    stages = list(table.reward_types[reward_type].stages)
    if reward_type == "synthetic" and tuple(stages) == SYNTHETIC_STAGES:
        return synthetic_route(payload)
    return stages
