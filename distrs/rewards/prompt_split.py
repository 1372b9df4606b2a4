"""Splitting a trainer's "prompt + response" text into the response alone.

OpenRLHF posts each rollout as ``query`` (the decoded prompt and response tokens together) plus
the ``prompts`` it generated from; only the response may be graded - a ``\\boxed{}`` in a few-shot
prompt must never earn a reward. OpenRLHF decodes the query from tokens, so the prompt is
there but not always at offset 0:

* ``query`` holds the whole prompt, at the start or after whatever the decode put before it (a
  BOS token such as ``<|begin_of_text|>``, a chat template's header): the response is what
  follows the prompt's first occurrence;
* the prompt was cut from the left to fit the context (OpenRLHF keeps the last
  ``max_len - max_tokens`` prompt tokens), so ``query`` - after any leading special tokens -
  starts with an end part of the prompt: the response follows the longest such part, found with
  the Knuth-Morris-Pratt prefix function of ``query + SEP + prompt`` (linear time). Overlaps
  shorter than ``MIN_OVERLAP`` characters are not trusted (a shared newline says nothing).

Only what follows the prompt is ever returned, so a ``\\boxed{}`` inside the prompt is never
graded. When no part of the prompt can be found, :func:`split_response` raises SplitError and
the route gives that row a reward of 0 with a flag in ``extra_logs`` (never the whole call an
error). Pure: no I/O.
"""

from __future__ import annotations

import re

MIN_OVERLAP = 16
_SEP = "\x00"
# Special tokens a decode with skip_special_tokens=False leaves in the text: <|...|> (Llama 3,
# Qwen, GPT), <｜...｜> (DeepSeek), <s>/</s>, <bos>/<eos>/<pad>/<unk>, [BOS]/[CLS], and spaces.
_LEADING_SPECIAL = re.compile(
    r"(?:\s+|<\|[^<>|\s]{1,64}\|>|<｜[^<>｜]{1,64}｜>|</?s>|<(?:bos|eos|pad|unk|startoftext|endoftext)>"
    r"|\[(?:BOS|CLS|SEP)\])*"
)


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
    """The response part of ``query``: what follows its prompt; SplitError when no part of the
    prompt can be found."""
    at = query.find(prompt)
    if at >= 0:
        return query[at + len(prompt) :]
    if _SEP not in query and _SEP not in prompt:
        lead = _LEADING_SPECIAL.match(query)
        start = lead.end() if lead else 0
        for offset in dict.fromkeys((start, 0)):  # after special tokens, then as is
            n = _suffix_prefix_overlap(prompt, query[offset:])
            if n >= MIN_OVERLAP:
                return query[offset + n :]
    raise SplitError("no part of the prompt was found in the query (neither whole nor its end)")
