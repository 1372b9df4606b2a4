"""Which ``\\boxed{}`` of a completion is its answer.

A model that corrects itself writes several boxes ("... \\boxed{5}. Wait, that is wrong ...
\\boxed{6}"); math-verify would read them together, so the answer is chosen here first and only
that box goes to the checker. ``last`` (the default) takes the final box, the one a reader would
take; ``first`` the first one; ``all_equal`` requires every box to agree with the ground truth
(a completion hedging between two answers earns nothing).

Boxes are ``\\boxed{...}``, ``\\boxed {...}`` and ``\\fbox{...}`` with balanced braces inside
(``\\boxed{\\frac{1}{2}}``); escaped braces ``\\{ \\}`` (sets) do not count towards the balance.
Written by hand because math-verify exposes no "which box" choice and a regex cannot match
nested braces. Pure: no I/O, so it is unit-tested on its own.
"""

from __future__ import annotations

import re
from enum import StrEnum


class BoxChoice(StrEnum):
    """Which of several boxed answers counts."""

    LAST = "last"
    FIRST = "first"
    ALL_EQUAL = "all_equal"


_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def boxed_answers(text: str) -> list[str]:
    """The contents of every complete box in ``text``, in order (an unclosed box is skipped)."""
    out: list[str] = []
    pos = 0
    while True:
        m = _OPEN.search(text, pos)
        if m is None:
            return out
        depth, i, start = 1, m.end(), m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2  # an escaped brace is content, not structure
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            i += 1
        if depth:
            return out  # unbalanced to the end of the text: no further complete box
        out.append(text[start : i - 1])
        pos = i


def chosen_answers(text: str, choice: BoxChoice) -> list[str] | None:
    """The boxed answers the checker must accept; None when there is no box (the caller then
    falls back to math-verify's own extraction from the plain text)."""
    boxes = [b for b in boxed_answers(text) if b.strip()]
    if not boxes:
        return None
    if choice is BoxChoice.FIRST:
        return boxes[:1]
    if choice is BoxChoice.LAST:
        return boxes[-1:]
    return list(dict.fromkeys(boxes))  # all_equal: each distinct box must be right
