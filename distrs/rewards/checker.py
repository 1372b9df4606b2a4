"""Special judges: a checker program decides whether a test's output is right (testlib-style).

Payload field ``checker: {"code": str, "language": "cpp" | "python"}``. For each test case whose
program exited 0, the checker runs as ``checker input.txt output.txt answer.txt`` (the case's
stdin, the program's stdout, the expected output) with testlib's exit-code convention: 0 accepted,
1 wrong answer, 2 presentation error (judged wrong), anything else a checker failure, which ends
the request ``internal_error`` (the task's fault, never the model's). Its stderr (testlib's
message) is kept in the case detail. A checker that does not compile is an ``invalid`` payload
naming ``checker.code``. The payload's ``files`` are available to the checker too, so a C++
checker can ``#include "testlib.h"`` shipped that way.

Every checker run gets a fresh work dir holding only the checker and the three files, written
before anything runs there: neither the program under test nor an earlier checker run can plant a
link that our writes would follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import MAX_BINARY_BYTES, InvalidPayload, MiB, snippet
from distrs.rewards.cxx_pch import JudgePch
from distrs.rewards.judge.cases import CaseResult, write_inputs
from distrs.rewards.judge.compiler import compile_program
from distrs.rewards.judge.payload import Case, JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits, Mounts, RunResult, Sandbox

CHECKER_LANGUAGES = ("cpp", "python")
_ARGS = ["input.txt", "output.txt", "answer.txt"]


@dataclass(frozen=True)
class CheckerSpec:
    code: str
    language: str


def parse_checker(payload: dict[str, Any]) -> CheckerSpec | None:
    raw = payload.get("checker")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidPayload("checker", 'must be an object {"code", "language"}')
    code, language = raw.get("code"), raw.get("language", "cpp")
    if not isinstance(code, str) or not code.strip():
        raise InvalidPayload("checker.code", "must be a non-empty string")
    if language not in CHECKER_LANGUAGES:
        raise InvalidPayload("checker.language", f"must be one of {', '.join(CHECKER_LANGUAGES)}")
    return CheckerSpec(code, str(language))


CheckFn = Callable[[RunResult, Case], CaseResult]


@dataclass
class Checker:
    """A prepared checker: the program (binary or script) and how to run it."""

    sandbox: Sandbox
    program: bytes
    argv: list[str]
    name: str
    mounts: Mounts | None
    p: JudgedPayload

    def check(self, r: RunResult, case: Case) -> CaseResult:
        limits = Limits(wall_s=10.0, cpu_s=10.0, memory_bytes=1024 * MiB, output_bytes=64 * 1024)
        with self.sandbox.session() as s:
            write_inputs(s, self.p)
            s.write_file(self.name, self.program, executable=True)
            s.write_file("input.txt", case.stdin.encode())
            s.write_file("output.txt", r.stdout)
            s.write_file("answer.txt", case.expected_stdout.encode())
            c = s.run([*self.argv, *_ARGS], limits=limits, mounts=self.mounts)
        message = snippet(c.stderr + c.stdout, 400)
        if c.exit_code == 0 and not c.timed_out:
            return CaseResult(Status.OK, r.wall_s, {"checker": message} if message else {})
        if c.exit_code in (1, 2) and not c.timed_out:
            got = r.stdout.decode("utf-8", errors="replace")
            return CaseResult(Status.WRONG_ANSWER, r.wall_s, {"checker": message, "stdout": snippet(got)})
        return CaseResult(
            Status.INTERNAL_ERROR,
            r.wall_s,
            {"reason": f"checker failed ({c.describe()})", "checker": message},
        )


def prepare_checker(
    sandbox: Sandbox,
    spec: CheckerSpec,
    p: JudgedPayload,
    settings: JudgeSettings,
    python: tuple[str, Mounts],
    cxx_pch: JudgePch,
) -> Checker:
    """Compile (C++, with the handler's precompiled header where there is one) or stage (python)
    the checker; InvalidPayload when it does not compile."""
    if spec.language == "python":
        exe, mounts = python
        return Checker(sandbox, spec.code.encode(), [exe, "-I", "-B", "checker.py"], "checker.py", mounts, p)
    with sandbox.session() as s:
        write_inputs(s, p)
        s.write_file("checker.cpp", spec.code.encode())
        pch = cxx_pch.use(sandbox.isolation)  # testlib checkers include bits/stdc++.h too
        argv = [settings.cxx, *settings.cxx_flags, *(pch.args if pch else ()), "-o", "checker", "checker.cpp"]
        failed, binary, _ = compile_program(
            s,
            argv,
            "checker",
            timeout_s=settings.compile_time_s,
            memory_mb=settings.compile_memory_mb,
            mounts=pch.mounts if pch else None,
        )
    if failed is not None or binary is None or len(binary) > MAX_BINARY_BYTES:
        output = failed.detail.get("compiler_output", "") if failed is not None else ""
        raise InvalidPayload("checker.code", f"the checker does not compile: {snippet(str(output), 1000)}")
    return Checker(sandbox, binary, ["./checker"], "checker", None, p)
