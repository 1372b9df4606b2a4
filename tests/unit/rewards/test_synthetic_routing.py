"""The synthetic reward type and request routing."""

from __future__ import annotations

import pytest

from distrs.core.model import Status
from distrs.core.pipeline_config import load_pipelines
from distrs.rewards.base import StageInput
from distrs.rewards.registry import get_handler
from distrs.rewards.routing import route
from distrs.rewards.synthetic import SyntheticHandler


def run(stage: str, payload: dict[str, object], timeout_s: float = 60.0) -> tuple[object, list[float]]:
    slept: list[float] = []
    h = SyntheticHandler(sleep=slept.append)
    return h.run(StageInput("r", "t", "synthetic", stage, payload, timeout_s=timeout_s)), slept


@pytest.mark.parametrize(
    ("stage", "payload", "outcome", "status", "slept"),
    [
        ("compile", {"durations": {"compile": 2, "execute": 1}}, "next", None, [2.0]),
        ("execute", {"durations": {"compile": 2, "execute": 1}}, "final", Status.OK, [1.0]),
        ("compile", {"durations": {"compile": 2}}, "final", Status.OK, [2.0]),
        (
            "compile",
            {"durations": {"compile": 2, "execute": 1}, "fail_stage": "compile", "status": "compile_error"},
            "final",
            Status.COMPILE_ERROR,
            [2.0],
        ),
        ("compile", {"durations": {"compile": 200, "execute": 1}}, "final", Status.TIMEOUT, [60.0]),
        (
            "execute",
            {"durations": {"execute": 1}, "status": "wrong_answer"},
            "final",
            Status.WRONG_ANSWER,
            [1.0],
        ),
    ],
)
def test_synthetic_stage_outcomes(
    stage: str, payload: dict[str, object], outcome: str, status: Status | None, slept: list[float]
) -> None:
    out, s = run(stage, payload)
    assert out.outcome == outcome and out.status == status and s == slept  # type: ignore[attr-defined]


def test_routes() -> None:
    t = load_pipelines()
    assert route(t, "synthetic", {"durations": {"execute": 1}}) == ["execute"]
    assert route(t, "synthetic", {"durations": {}}) == ["compile"]
    assert route(t, "cpp", {}) == ["compile", "run"]
    assert route(t, "synthetic", {"durations": {"compile": 2, "execute": 1}}) == ["compile", "execute"]
    with pytest.raises(KeyError):
        route(t, "cobol", {})


def test_registry_names_missing_handler() -> None:
    with pytest.raises(KeyError, match="'cobol' at stage 'run'"):
        get_handler("cobol", "run")
