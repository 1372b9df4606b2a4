"""Call-based (``fn_name``) and assert tests of the python type, in the real jail."""

from __future__ import annotations

from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox.local import LocalSandbox


def judge(sb: LocalSandbox, payload: dict[str, Any]) -> StageOutput:
    return PythonRunHandler(sb, JudgeSettings()).run(
        StageInput("r", "t", "python", "run", payload, timeout_s=60)
    )


TWO_SUM = """
class Solution:
    def twoSum(self, nums, target):
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i

if __name__ == "__main__":
    print(input())  # a main block must not run under the harness
"""


def test_call_based_method_of_solution(bwrap_sandbox: LocalSandbox) -> None:
    tests = [
        {"stdin": "[2, 7, 11, 15]\n9", "expected_stdout": "[0, 1]"},
        {"stdin": "[3, 2, 4]\n6", "expected_stdout": "[1, 2]"},
        {"stdin": "[3, 3]\n6", "expected_stdout": "[1, 0]"},  # wrong on purpose
    ]
    out = judge(bwrap_sandbox, {"code": TWO_SUM, "tests": tests, "fn_name": "twoSum"})
    assert out.status is Status.WRONG_ANSWER and out.score == pytest.approx(2 / 3)
    assert [c["status"] for c in out.detail["tests"]] == ["ok", "ok", "wrong_answer"]


def test_call_based_function_json_values(bwrap_sandbox: LocalSandbox) -> None:
    code = "def stats(xs):\n    return {'mean': sum(xs) / len(xs), 'n': len(xs), 'ok': True}"
    tests = [{"stdin": "[1, 2, 3]", "expected_stdout": '{"n": 3, "mean": 2, "ok": true}'}]
    out = judge(bwrap_sandbox, {"code": code, "tests": tests, "fn_name": "stats"})
    assert out.status is Status.OK, out.detail
    missing = judge(bwrap_sandbox, {"code": code, "tests": tests, "fn_name": "nope"})
    assert missing.status is Status.RUNTIME_ERROR and "not found" in missing.detail["tests"][0]["stderr"]


def test_assert_tests_with_early_stop(bwrap_sandbox: LocalSandbox) -> None:
    code = "def add(a, b):\n    return a + b if a < 100 else 0"
    asserts = ["assert add(1, 2) == 3", "assert add(100, 1) == 101", "assert add(2, 2) == 4"]
    out = judge(bwrap_sandbox, {"code": code, "asserts": asserts})
    assert out.status is Status.RUNTIME_ERROR and out.score == pytest.approx(2 / 3)
    assert "AssertionError" in out.detail["tests"][1]["stderr"]
    stop = judge(bwrap_sandbox, {"code": code, "asserts": asserts, "scoring": "all"})
    assert stop.score == 0.0 and len(stop.detail["tests"]) == 2  # stopped at the first failure


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"code": "x", "tests": [], "asserts": ["assert 1"]}, "asserts"),
        ({"code": "x", "asserts": "assert 1"}, "asserts"),
        ({"code": "x", "tests": [{"stdin": "", "expected_stdout": ""}], "fn_name": "a b"}, "fn_name"),
    ],
)
def test_bad_modes_are_invalid(bwrap_sandbox: LocalSandbox, payload: dict[str, Any], field: str) -> None:
    out = judge(bwrap_sandbox, payload)
    assert out.status is Status.INVALID and out.detail["error"]["field"] == field
