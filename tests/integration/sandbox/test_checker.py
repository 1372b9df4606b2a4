"""Special judges: testlib-style checker programs (C++ and python) in the real jail."""

from __future__ import annotations

from typing import Any

from distrs.core.model import Status
from distrs.rewards import cpp
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox.local import LocalSandbox

# Accepts any permutation of the expected numbers (a task with many right answers).
CPP_CHECKER = r"""
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>
int main(int argc, char** argv) {
  std::ifstream out(argv[2]), ans(argv[3]);
  std::vector<long> a, b; long x;
  while (out >> x) a.push_back(x);
  while (ans >> x) b.push_back(x);
  std::sort(a.begin(), a.end()); std::sort(b.begin(), b.end());
  if (a != b) { fprintf(stderr, "not a permutation of the answer\n"); return 1; }
  return 0;
}
"""

PY_CHECKER = """
import sys
inp, out, ans = (open(p).read() for p in sys.argv[1:4])
n = int(inp)
got = [int(t) for t in out.split()]
ok = len(got) == 2 and got[0] * got[1] == n and 1 < got[0] <= got[1]
sys.stderr.write("ok" if ok else "not a factorisation")
sys.exit(0 if ok else 1)
"""


def py_judge(sb: LocalSandbox, payload: dict[str, Any]) -> StageOutput:
    return PythonRunHandler(sb, JudgeSettings()).run(
        StageInput("r", "t", "python", "run", payload, timeout_s=60)
    )


def test_python_checker_accepts_any_valid_answer(bwrap_sandbox: LocalSandbox) -> None:
    code = "n = int(input())\nd = next(d for d in range(2, n) if n % d == 0)\nprint(d, n // d)"
    tests = [{"stdin": "15", "expected_stdout": "3 5"}, {"stdin": "12", "expected_stdout": "3 4"}]
    out = py_judge(
        bwrap_sandbox, {"code": code, "tests": tests, "checker": {"code": PY_CHECKER, "language": "python"}}
    )
    assert out.status is Status.OK and out.score == 1.0, out.detail  # "2 6" for 12 is right too
    wrong = py_judge(
        bwrap_sandbox,
        {
            "code": "print(1, int(input()))",
            "tests": tests,
            "checker": {"code": PY_CHECKER, "language": "python"},
        },
    )
    assert (
        wrong.status is Status.WRONG_ANSWER and "not a factorisation" in wrong.detail["tests"][0]["checker"]
    )


def test_cpp_checker_with_the_cpp_type(bwrap_sandbox: LocalSandbox) -> None:
    settings = JudgeSettings()
    prog = '#include <cstdio>\nint main(){ puts("3 1 2"); }'
    tests = [{"stdin": "", "expected_stdout": "1 2 3"}]
    payload = {"code": prog, "tests": tests, "checker": {"code": CPP_CHECKER}}
    compiled = cpp.CompileHandler(bwrap_sandbox, settings).run(
        StageInput("r", "t", "cpp", "compile", payload)
    )
    out = cpp.RunHandler(bwrap_sandbox, settings).run(
        StageInput("r", "t", "cpp", "run", payload, artifacts=compiled.artifacts, timeout_s=60)
    )
    assert out.status is Status.OK, out.detail
    payload["tests"] = [{"stdin": "", "expected_stdout": "1 2 4"}]
    out = cpp.RunHandler(bwrap_sandbox, settings).run(
        StageInput("r", "t", "cpp", "run", payload, artifacts=compiled.artifacts, timeout_s=60)
    )
    assert out.status is Status.WRONG_ANSWER and "permutation" in out.detail["tests"][0]["checker"]


def test_broken_or_failing_checker_is_not_the_models_fault(bwrap_sandbox: LocalSandbox) -> None:
    tests = [{"stdin": "", "expected_stdout": "x"}]
    bad = py_judge(bwrap_sandbox, {"code": "print(1)", "tests": tests, "checker": {"code": "int main( {"}})
    assert bad.status is Status.INVALID and bad.detail["error"]["field"] == "checker.code"
    crash = {"code": "import sys; sys.exit(3)", "language": "python"}
    out = py_judge(bwrap_sandbox, {"code": "print(1)", "tests": tests, "checker": crash})
    assert out.status is Status.INTERNAL_ERROR and "checker failed" in out.detail["tests"][0]["reason"]
    lang = py_judge(
        bwrap_sandbox, {"code": "print(1)", "tests": tests, "checker": {"code": "x", "language": "go"}}
    )
    assert lang.status is Status.INVALID and lang.detail["error"]["field"] == "checker.language"


def test_program_cannot_plant_links_for_the_checker(bwrap_sandbox: LocalSandbox) -> None:
    """The program links answer.txt to a host file; the checker's fresh dir never sees it."""
    code = "import os\nos.symlink('/etc/hostname', 'answer.txt')\nos.symlink('/etc/hostname', 'output.txt')\nprint(5)"
    checker = {
        "code": "import sys\nsys.exit(0 if open(sys.argv[3]).read() == '5' else 1)",
        "language": "python",
    }
    out = py_judge(
        bwrap_sandbox, {"code": code, "tests": [{"stdin": "", "expected_stdout": "5"}], "checker": checker}
    )
    assert out.status is Status.OK, out.detail
