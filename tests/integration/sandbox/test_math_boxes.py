"""The math reward judges the chosen ``\\boxed{}`` with the real jailed math-verify checker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput
from distrs.rewards.boxed import BoxChoice
from distrs.rewards.math_reward import MathSettings, VerifyHandler
from distrs.sandbox.local import LocalSandbox
from tests.requirements import need


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VerifyHandler]:
    from distrs.sandbox.factory import probe_bwrap
    from distrs.sandbox.local import BWRAP
    from tests.integration.sandbox.conftest import sandbox_settings

    settings = sandbox_settings(tmp_path_factory.mktemp("math"))
    reason = probe_bwrap(settings)
    need(
        "bubblewrap jail",
        "real sandboxes run untrusted programs in it",
        found=reason is None,
        detail=reason or "",
    )
    h = VerifyHandler(LocalSandbox(settings, BWRAP), MathSettings(timeout_s=8))
    yield h
    h.close()


def judge(h: VerifyHandler, completion: str, truth: str, **extra: Any) -> tuple[Status, float]:
    out = h.run(
        StageInput("r", "t", "math", "verify", {"completion": completion, "ground_truth": truth, **extra})
    )
    assert out.status is not None
    return out.status, out.score


CORRECTED = "First try: \\boxed{5}. Wait, 2+4 is not 5; the answer is \\boxed{6}."
WRONG_LAST = "The answer is \\boxed{6}. Hmm, maybe \\boxed{7}."


@pytest.mark.parametrize(
    ("completion", "truth", "extra", "status"),
    [
        (CORRECTED, "6", {}, Status.OK),  # the last box counts by default
        (WRONG_LAST, "6", {}, Status.WRONG_ANSWER),
        (CORRECTED, "6", {"boxed": "first"}, Status.WRONG_ANSWER),
        (WRONG_LAST, "6", {"boxed": "first"}, Status.OK),
        (CORRECTED, "6", {"boxed": "all_equal"}, Status.WRONG_ANSWER),
        ("\\boxed{6} so indeed \\boxed{6}", "6", {"boxed": "all_equal"}, Status.OK),
        ("\\boxed{\\frac{1}{\\sqrt{4}}}", "1/2", {}, Status.OK),  # nested braces
        ("\\fbox{12}", "12", {}, Status.OK),
        ("The length is \\boxed{10\\text{ cm}}", "10", {}, Status.OK),  # units
        ("So \\boxed{50\\%} of them", "50", {}, Status.OK),  # percent
        ("\\boxed{\\{1, 2\\}} or maybe \\boxed{\\{1, 2, 3\\}}", "\\{3,2,1\\}", {}, Status.OK),
        ("no box, the answer is 6", "6", {}, Status.OK),  # no box: math-verify extracts
    ],
)
def test_boxed_choice(
    handler: VerifyHandler, completion: str, truth: str, extra: dict[str, Any], status: Status
) -> None:
    got, score = judge(handler, completion, truth, **extra)
    assert got is status
    assert score == (1.0 if status is Status.OK else 0.0)


def test_setting_picks_the_default_and_bad_choice_is_invalid(handler: VerifyHandler) -> None:
    first = VerifyHandler(handler._sandbox, MathSettings(timeout_s=8, boxed=BoxChoice.FIRST))
    try:
        assert judge(first, WRONG_LAST, "6") == (Status.OK, 1.0)
    finally:
        first.close()
    out = handler.run(
        StageInput("r", "t", "math", "verify", {"completion": "x", "ground_truth": "1", "boxed": "middle"})
    )
    assert out.status is Status.INVALID and out.detail["error"]["field"] == "boxed"
