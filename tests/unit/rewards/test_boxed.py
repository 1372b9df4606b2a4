"""Choosing the boxed answer of a completion (pure)."""

from __future__ import annotations

import pytest

from distrs.rewards.boxed import BoxChoice, boxed_answers, chosen_answers


@pytest.mark.parametrize(
    ("text", "boxes"),
    [
        ("no box here", []),
        ("\\boxed{5}", ["5"]),
        ("first \\boxed{5}, then \\boxed{6}", ["5", "6"]),
        ("\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"]),
        ("\\boxed{\\frac{\\sqrt{2}}{2}} and more", ["\\frac{\\sqrt{2}}{2}"]),
        ("\\fbox{7}", ["7"]),
        ("\\boxed {8}", ["8"]),
        ("\\boxed{\\{1, 2\\}}", ["\\{1, 2\\}"]),  # escaped braces are content
        ("\\boxed{\\}}", ["\\}"]),
        ("\\boxed{10\\text{ cm}}", ["10\\text{ cm}"]),
        ("\\boxed{50\\%}", ["50\\%"]),
        ("\\boxed{3} then an unclosed \\boxed{4", ["3"]),
        ("\\boxed{}", [""]),
    ],
)
def test_boxed_answers(text: str, boxes: list[str]) -> None:
    assert boxed_answers(text) == boxes


SELF_CORRECTING = "So \\boxed{5}. Wait, I dropped a carry: the answer is \\boxed{6}."


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (BoxChoice.LAST, ["6"]),
        (BoxChoice.FIRST, ["5"]),
        (BoxChoice.ALL_EQUAL, ["5", "6"]),
    ],
)
def test_choice(choice: BoxChoice, expected: list[str]) -> None:
    assert chosen_answers(SELF_CORRECTING, choice) == expected


def test_no_box_means_fall_back_and_empty_boxes_do_not_count() -> None:
    assert chosen_answers("the answer is 6", BoxChoice.LAST) is None
    assert chosen_answers("\\boxed{6} \\boxed{ }", BoxChoice.LAST) == ["6"]
    assert chosen_answers("\\boxed{6} and again \\boxed{6}", BoxChoice.ALL_EQUAL) == ["6"]
