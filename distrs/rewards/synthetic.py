"""The ``synthetic`` reward type: each stage sleeps for the duration the payload gives.

Payload (DESIGN.md): ``{"durations": {STAGE: seconds}, "fail_stage": null, "status": "ok"}``.
A stage whose duration is absent or 0 is skipped: the request never queues there (the type's
route hook, :func:`synthetic_route`), and it ends at its last stage with a positive duration. A
duration at or above the stage timeout sleeps the timeout and ends ``timeout``; ``fail_stage``
ends the request with ``status`` at that stage. It drives load tests and trace replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from distrs.core.model import Status
from distrs.core.reward_type import RewardType
from distrs.rewards.base import StageInput, StageOutput

SYNTHETIC_STAGES = ("compile", "execute")


def synthetic_route(stages: Sequence[str], payload: Mapping[str, object]) -> list[str]:
    """The stages a synthetic request visits: those of ``stages`` with a positive duration (at
    least the first)."""
    durations = payload.get("durations") or {}
    assert isinstance(durations, dict)
    route = [s for s in stages if float(durations.get(s, 0) or 0) > 0]
    return route or [stages[0]]


class SyntheticHandler:
    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep

    def ready(self) -> tuple[bool, str]:
        return True, ""

    def run(self, inp: StageInput) -> StageOutput:
        durations = inp.payload.get("durations") or {}
        duration = float(durations.get(inp.stage, 0.0) or 0.0)
        if duration >= inp.timeout_s:
            self._sleep(inp.timeout_s)
            return StageOutput.final(Status.TIMEOUT, 0.0, stage=inp.stage, timeout_s=inp.timeout_s)
        if duration > 0:
            self._sleep(duration)
        if inp.payload.get("fail_stage") == inp.stage:
            status = Status(inp.payload.get("status") or "runtime_error")
            return StageOutput.final(status, 1.0 if status is Status.OK else 0.0, stage=inp.stage)
        route = synthetic_route(SYNTHETIC_STAGES, inp.payload)
        if inp.stage not in route or route.index(inp.stage) == len(route) - 1:
            status = Status(inp.payload.get("status") or "ok")
            return StageOutput.final(status, 1.0 if status is Status.OK else 0.0)
        return StageOutput.next()


# Entry point ``synthetic`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="synthetic",
    stages=SYNTHETIC_STAGES,
    handlers=dict.fromkeys(SYNTHETIC_STAGES, SyntheticHandler),
    route=synthetic_route,
)
