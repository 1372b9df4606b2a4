"""Turning a finished sequence into a reward payload.

Models put their program in a Markdown fenced block; the *last* block in the wanted language is the
final answer (earlier ones are usually drafts or examples). Math answers are judged on the full
completion - the math verifier itself finds the final ``\\boxed{}``/answer - so nothing is cut.
Payload shapes follow DESIGN.md ("Payloads of the judged types").
"""

from __future__ import annotations

import re
from typing import Any

#: Fence info strings accepted per reward type (lower-case; the first word of the info string).
LANGUAGE_TAGS: dict[str, tuple[str, ...]] = {
    "cuda": ("cuda", "cu", "cpp", "c++"),
    "cpp": ("cpp", "c++", "cc", "cxx", "c"),
    "python": ("python", "py", "python3"),
}

# An opening fence of 3+ backticks or tildes, its info string, the body, and a matching close.
_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^[ \t]{0,3}(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as ``(language tag, body)``, in order; the tag is lower-case, maybe ''."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").strip().split()
        tag = info[0].lower() if info else ""
        out.append((tag, m.group("body")))
    return out


def extract_code(text: str, reward_type: str) -> str | None:
    """The last fenced block in ``reward_type``'s language (falling back to the last untagged block).

    Returns None when the text holds no usable block. An unterminated last fence (generation cut
    off by the length limit) is ignored: the program is incomplete.
    """
    tags = LANGUAGE_TAGS.get(reward_type, (reward_type,))
    blocks = fenced_blocks(text)
    for tag, body in reversed(blocks):
        if tag in tags:
            return body
    for tag, body in reversed(blocks):
        if tag == "":
            return body
    return None


def build_payload(
    reward_type: str,
    completion: str,
    *,
    ground_truth: str | None = None,
    tests: list[dict[str, Any]] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The request payload for a finished completion.

    * ``math``: ``{"completion", "ground_truth"}`` - the full completion.
    * ``cpp``/``python``/``cuda``: ``{"code", "tests", ...options}``; ``code`` is the last fenced block
      (empty string when there is none, which the service scores as a compile/runtime error).
    * any other type: ``options`` plus ``completion``.
    """
    if reward_type == "math":
        return {"completion": completion, "ground_truth": "" if ground_truth is None else str(ground_truth)}
    if reward_type in LANGUAGE_TAGS:
        code = extract_code(completion, reward_type)
        payload: dict[str, Any] = {"code": code or "", "tests": list(tests or [])}
        payload.update(options)
        return payload
    return {**options, "completion": completion}
