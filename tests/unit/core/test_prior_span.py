"""The span prior of a task with no history (core.history.prior_span), table-driven."""

from __future__ import annotations

import pytest

from distrs.core.history import SpanSample, prior_span

NOW = 10_000.0
DEFAULT = 600.0


def s(rt: str | None, age_s: float, span: float) -> SpanSample:
    return SpanSample(rt, NOW - age_s, span)


@pytest.mark.parametrize(
    ("samples", "reward_type", "expected"),
    [
        pytest.param([], "math", DEFAULT, id="nothing finished yet: the default"),
        pytest.param([s("math", 10, 4.0)], "math", 4.0, id="one batch of the type"),
        pytest.param(
            [s("math", 10, 4.0), s("math", 20, 5.0), s("math", 30, 300.0)], "math", 5.0, id="median, not mean"
        ),
        pytest.param(
            [s("cuda", 10, 40.0), s("math", 10, 2.0), s("math", 20, 3.0)], "cuda", 40.0, id="own type first"
        ),
        pytest.param([s("cuda", 10, 40.0), s("cuda", 20, 60.0)], "math", 50.0, id="no own type: any type"),
        pytest.param([s("cuda", 10, 40.0)], None, 40.0, id="type unknown: any type"),
        pytest.param([s("math", 3601, 4.0)], "math", DEFAULT, id="too old: the default"),
        pytest.param([s("math", 3601, 4.0), s("cpp", 5, 9.0)], "math", 9.0, id="old own type, fresh other"),
        pytest.param([s("math", -5, 4.0)], "math", DEFAULT, id="from the future (clock skew): ignored"),
        pytest.param([s("math", 10, 4000.0)], "math", DEFAULT, id="never above the default"),
    ],
)
def test_prior_span(samples: list[SpanSample], reward_type: str | None, expected: float) -> None:
    assert prior_span(samples, reward_type, NOW, DEFAULT) == pytest.approx(expected)
