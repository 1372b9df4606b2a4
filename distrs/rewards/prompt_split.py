"""Splitting a trainer's "prompt + response" text into the response alone.

OpenRLHF posts each rollout as ``query`` (the decoded prompt and response tokens together) plus
the ``prompts`` it generated from; only the response may be graded - a ``\\boxed{}`` in a few-shot
prompt must never earn a reward. Two shapes occur in practice:

* ``query`` starts with the prompt: the response is the rest;
* the prompt was cut from the left to fit the context (OpenRLHF keeps the last
  ``max_len - max_tokens`` prompt tokens), so ``query`` starts with an end part of the prompt:
  the response follows the longest such part, found with the Knuth-Morris-Pratt prefix function
  of ``query + SEP + prompt`` (linear time). Overlaps shorter than ``MIN_OVERLAP`` characters are
  not trusted (a shared newline says nothing).

Anything else cannot be split safely, so :func:`split_response` raises and the route answers 422
rather than grade text that may hold the prompt. Pure: no I/O.
"""

from __future__ import annotations

MIN_OVERLAP = 16
_SEP = "\x00"


class SplitError(ValueError):
    """The query does not start with its prompt (nor with an end part of it)."""


def _suffix_prefix_overlap(prompt: str, query: str) -> int:
    """Length of the longest end part of ``prompt`` that ``query`` starts with."""
    s = query + _SEP + prompt
    pi = [0] * len(s)
    for i in range(1, len(s)):
        k = pi[i - 1]
        while k and s[i] != s[k]:
            k = pi[k - 1]
        if s[i] == s[k]:
            k += 1
        pi[i] = k
    return min(pi[-1], len(query), len(prompt)) if s else 0


def split_response(query: str, prompt: str) -> str:
    """The response part of ``query``; SplitError when it cannot be told apart from the prompt."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    if _SEP not in query and _SEP not in prompt:
        n = _suffix_prefix_overlap(prompt, query)
        if n >= MIN_OVERLAP:
            return query[n:]
    raise SplitError("the query does not start with its prompt (nor with the end of it)")
