"""Splitting OpenRLHF's prompt + response ``query`` (pure)."""

from __future__ import annotations

import pytest

from distrs.rewards.prompt_split import SplitError, split_response

FEW_SHOT = "Example: 2+2 = \\boxed{4}.\nNow solve: what is 6*7? Put the answer in \\boxed{}.\n"


def test_query_starting_with_the_prompt() -> None:
    assert split_response(FEW_SHOT + "It is \\boxed{42}.", FEW_SHOT) == "It is \\boxed{42}."
    assert split_response("PROMPT answer", "PROMPT ") == "answer"
    assert split_response("answer only", "") == "answer only"


def test_left_truncated_prompt() -> None:
    """OpenRLHF keeps the last prompt tokens when the prompt is too long."""
    kept = FEW_SHOT[30:]
    assert split_response(kept + "I think 40", FEW_SHOT) == "I think 40"


def test_response_repeating_the_prompt_end_is_kept_whole() -> None:
    prompt = "Q: what is the capital of France? A:"
    assert split_response(prompt + " Paris. Q: what is the capital of France? A:", prompt) == (
        " Paris. Q: what is the capital of France? A:"
    )


@pytest.mark.parametrize(
    ("query", "prompt"),
    [
        ("The answer is \\boxed{42}", FEW_SHOT),  # query without its prompt
        ("\n" + "x", "prompt text ending in a newline\n"),  # a one-character overlap proves nothing
        ("Something else entirely " + FEW_SHOT, FEW_SHOT),
    ],
)
def test_unsplittable(query: str, prompt: str) -> None:
    with pytest.raises(SplitError):
        split_response(query, prompt)
