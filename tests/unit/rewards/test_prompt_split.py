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
        ("<|begin_of_text|>unrelated", FEW_SHOT),
    ],
)
def test_unsplittable(query: str, prompt: str) -> None:
    with pytest.raises(SplitError):
        split_response(query, prompt)


@pytest.mark.parametrize(
    "lead",
    [
        "<|begin_of_text|>",
        "<s> ",
        "<｜begin▁of▁sentence｜>",
        "<bos>",
        "[BOS]",
        "<|im_start|>system\nBe brief.<|im_end|>\n",
    ],
)
def test_prompt_after_special_tokens_or_a_template_header(lead: str) -> None:
    """OpenRLHF decodes the query from tokens with the special ones kept: the prompt is inside."""
    assert split_response(lead + FEW_SHOT + "It is \\boxed{42}.", FEW_SHOT) == "It is \\boxed{42}."


def test_left_cut_prompt_after_a_bos_token() -> None:
    kept = FEW_SHOT[30:]
    assert split_response("<|begin_of_text|>" + kept + "I think 40", FEW_SHOT) == "I think 40"


def test_only_what_follows_the_prompt_is_returned() -> None:
    """Whatever precedes the prompt is never graded, nor is the prompt itself."""
    assert split_response("Something else entirely " + FEW_SHOT + "40", FEW_SHOT) == "40"
