"""The candidate's source from a model's completion: the last fenced Python block.

KernelBench prompts ask for the new architecture in a Markdown code block; models often show drafts,
the reference or the CUDA on its own first, so the *last* block is the answer. A block tagged
``python``/``py``/``python3`` (any case, first word of the info string) wins; without one, the last
untagged block that parses as Python is taken (an untagged CUDA or shell block does not parse). An
unterminated fence (the generation hit its length limit) is never taken: the program is incomplete.
Pure and dependency-free so the compile handler, tests and tools share one reading.
"""

from __future__ import annotations

import ast
import re

PYTHON_TAGS = frozenset({"python", "py", "python3"})

# An opening fence of 3+ backticks or tildes at the start of a line (up to 3 spaces of indent), its
# info string, the body, and a closing fence of the same characters and length on its own line.
_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^[ \t]{0,3}(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every closed fenced block as ``(tag, body)`` in order; the tag is lower-case, maybe ''."""
    text = text.replace("\r\n", "\n")
    out = []
    for m in _FENCE.finditer(text):
        info = m.group("info").split()
        out.append((info[0].lower() if info else "", m.group("body")))
    return out


def _parses(src: str) -> bool:
    try:
        ast.parse(src)
    except (SyntaxError, ValueError):
        return False
    return True


def extract_source(completion: str) -> str | None:
    """The last ```python (or ```py) block's body; else the last untagged block that parses; else None."""
    blocks = fenced_blocks(completion)
    for tag, body in reversed(blocks):
        if tag in PYTHON_TAGS:
            return body
    for tag, body in reversed(blocks):
        if tag == "" and body.strip() and _parses(body):
            return body
    return None
