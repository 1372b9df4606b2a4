"""Pure parts: the backoff policy, Retry-After parsing, code extraction and payload building."""

from __future__ import annotations

import email.utils

import pytest
from distrs_client.extract import build_payload, extract_code, fenced_blocks
from distrs_client.retry import RetryPolicy, is_retryable_status, parse_retry_after


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"),
    [(0, 1.0, 0.05), (1, 1.0, 0.1), (3, 0.5, 0.2), (10, 1.0, 2.0), (10, 0.0, 0.0), (1000, 1.0, 2.0)],
)
def test_backoff_is_capped_exponential_times_the_draw(attempt: int, draw: float, expected: float) -> None:
    assert RetryPolicy().backoff(attempt, draw) == pytest.approx(expected)


def test_retry_after_overrides_backoff_and_is_capped() -> None:
    p = RetryPolicy(max_delay_retry_after_s=5)
    assert p.delay(0, 0.9, 3.0) == 3.0
    assert p.delay(0, 0.9, 100.0) == 5.0
    assert p.delay(2, 0.5, None) == pytest.approx(0.1)


def test_budget() -> None:
    p = RetryPolicy(max_elapsed_s=10)
    assert p.should_retry(9.0, 1.0) and not p.should_retry(9.5, 1.0)


@pytest.mark.parametrize(
    ("status", "retry"), [(429, True), (500, True), (503, True), (400, False), (404, False)]
)
def test_retryable_statuses(status: int, retry: bool) -> None:
    assert is_retryable_status(status) is retry


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("2", 0) == 2.0
    assert parse_retry_after(None, 0) is None and parse_retry_after("soon", 0) is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(30.0)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0


COMPLETION = """Let me think.
```python
print("draft")
```
A C++ version:
```cpp
#include <cstdio>
int main() { puts("cpp"); }
```
Final answer:
```python
print("final")
```
"""


def test_last_block_in_the_wanted_language_wins() -> None:
    assert extract_code(COMPLETION, "python") == 'print("final")\n'
    assert extract_code(COMPLETION, "cpp") is not None and "puts" in extract_code(COMPLETION, "cpp")  # type: ignore[operator]
    assert "puts" in (extract_code(COMPLETION, "cuda") or "")  # cuda accepts cpp-tagged blocks


def test_untagged_fallback_tildes_and_unterminated_blocks() -> None:
    assert extract_code("```\nx = 1\n```", "python") == "x = 1\n"
    assert extract_code("~~~py\nx = 2\n~~~", "python") == "x = 2\n"
    assert extract_code("```cuda\n__global__ void k(){}\n```", "cuda") == "__global__ void k(){}\n"
    assert extract_code("no code here", "python") is None
    assert (
        extract_code("```python\nprint(1)\n```\n```python\ncut off by the length lim", "python")
        == "print(1)\n"
    )


def test_fence_with_info_string_attributes() -> None:
    assert fenced_blocks("````python title=a.py\ny = 3\n````") == [("python", "y = 3\n")]


def test_build_payload_per_type() -> None:
    assert build_payload("math", "so \\boxed{4}", ground_truth="4") == {
        "completion": "so \\boxed{4}",
        "ground_truth": "4",
    }
    tests = [{"stdin": "1", "expected_stdout": "1"}]
    p = build_payload("python", COMPLETION, tests=tests, compare="tokens")
    assert p == {"code": 'print("final")\n', "tests": tests, "compare": "tokens"}
    assert build_payload("cpp", "no code", tests=[])["code"] == ""
