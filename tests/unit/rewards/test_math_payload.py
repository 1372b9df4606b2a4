"""Math payload validation happens before any checker process is started."""

from __future__ import annotations

from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput
from distrs.rewards.math_reward import MathSettings, VerifyHandler


class NoSandbox:
    isolation = "none"

    def session(self) -> Any:
        raise AssertionError("a bad payload must not start the checker")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"ground_truth": "1"}, "completion"),
        ({"completion": 1, "ground_truth": "1"}, "completion"),
        ({"completion": "x"}, "ground_truth"),
        ({"completion": "x", "ground_truth": "  "}, "ground_truth"),
        ({"completion": "x" * 200, "ground_truth": "1"}, "completion"),
    ],
)
def test_invalid_math_payload(payload: dict[str, Any], field: str) -> None:
    h = VerifyHandler(sandbox=NoSandbox(), settings=MathSettings(max_chars=100))  # type: ignore[arg-type]
    out = h.run(StageInput("r", "t", "math", "verify", payload))
    assert out.status is Status.INVALID and out.detail["error"]["field"] == field
