"""extract_source: the last Python fence of a completion, with an untagged fallback that must parse."""

from __future__ import annotations

import pytest

from distrs.rewards.kernelbench.completion import extract_source, fenced_blocks

MODEL = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
DRAFT = "class ModelNew:\n    pass\n"
CUDA = "__global__ void k(float* x) { x[0] = 1.f; }\n"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        # the last python block wins over drafts
        (f"Draft:\n```python\n{DRAFT}```\nFinal:\n```python\n{MODEL}```\n", MODEL),
        (f"```py\n{MODEL}```", MODEL),
        (f"```Python3 title=model_new.py\n{MODEL}```", MODEL),
        # a tagged python block wins over a later untagged one
        (f"```python\n{MODEL}```\nUsage:\n```\n{DRAFT}```\n", MODEL),
        # other languages are never taken; untagged fallback must parse as Python
        (f"```cpp\n{CUDA}```\n```\n{MODEL}```\n", MODEL),
        (f"```\n{MODEL}```\n```\n{CUDA}```\n", MODEL),
        (f"```cuda\n{CUDA}```", None),
        (f"```\n{CUDA}```", None),
        ("no code at all", None),
        ("", None),
        # a cut-off last block is ignored; the earlier complete one is used
        (f"```python\n{DRAFT}```\n```python\n{MODEL[:20]}", DRAFT),
        (f"```python\n{MODEL[:30]}", None),
        # tildes, longer fences (holding a ``` inside), CRLF line ends, indented fences
        (f"~~~python\n{MODEL}~~~\n", MODEL),
        ('````python\nDOC = """\n```\nx\n```\n"""\n````\n', 'DOC = """\n```\nx\n```\n"""\n'),
        (f"```python\r\n{MODEL.replace(chr(10), chr(13) + chr(10))}```\r\n", MODEL),
        (f"  ```python\n{MODEL}  ```\n", MODEL),
        # an empty untagged block is not a program
        ("```\n\n```", None),
    ],
)
def test_extract_source(completion: str, expected: str | None) -> None:
    assert extract_source(completion) == expected


def test_fenced_blocks_lists_tags_in_order() -> None:
    text = f"```python\n{DRAFT}```\n```CUDA\n{CUDA}```\n```\nx = 1\n```\n"
    assert fenced_blocks(text) == [("python", DRAFT), ("cuda", CUDA), ("", "x = 1\n")]
