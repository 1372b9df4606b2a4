"""Running a judged program once per test case and turning the runs into a result.

Time budget: the whole stage gets ``StageInput.timeout_s``; each test gets the smaller of its own
limit and what is left of the stage budget, and the cases that no longer fit end ``timeout``
without running. With ``scoring="all"`` judging stops at the first failure.

Status of the request: ``ok`` when every case passes, otherwise the status of the first failing
case (``wrong_answer``, ``runtime_error`` or ``timeout``). A sandbox failure raises
``SandboxError`` and ends ``internal_error`` - never the model's fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import MiB, StageOutput, encode_binary, snippet
from distrs.rewards.compare import outputs_match
from distrs.rewards.judge.payload import FETCH_FILE_BYTES, Case, JudgedPayload
from distrs.sandbox import Limits, Mounts, RunResult, Session, Termination


@dataclass
class CaseResult:
    status: Status
    time_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "time_s": round(self.time_s, 4), **self.detail}


def judge_case(r: RunResult, case: Case, p: JudgedPayload) -> CaseResult:
    """Map one run to a case status; only the output's snippet is kept."""
    if r.timed_out:
        return CaseResult(Status.TIMEOUT, r.wall_s, {"reason": r.describe()})
    if r.termination is Termination.OUTPUT_LIMIT:
        return CaseResult(Status.RUNTIME_ERROR, r.wall_s, {"reason": "output limit exceeded"})
    if r.memory_exceeded:
        return CaseResult(
            Status.MEMORY_LIMIT_EXCEEDED, r.wall_s, {"reason": r.describe(), "stderr": snippet(r.stderr)}
        )
    if not r.ok:
        return CaseResult(
            Status.RUNTIME_ERROR, r.wall_s, {"reason": r.describe(), "stderr": snippet(r.stderr)}
        )
    got = r.stdout.decode("utf-8", errors="replace")
    if not case.check_output or outputs_match(got, case.expected_stdout, p.compare, p.float_tol):
        return CaseResult(Status.OK, r.wall_s)
    return CaseResult(
        Status.WRONG_ANSWER,
        r.wall_s,
        {"stdout": snippet(got), "expected": snippet(case.expected_stdout)},
    )


@dataclass
class Verdict:
    status: Status
    passed: int
    total: int
    cases: list[CaseResult]
    first_run: RunResult | None = None  # kept for mode="raw"

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def run_tests(
    session: Session,
    argv: Sequence[str],
    p: JudgedPayload,
    limits: Limits,
    budget_s: float,
    *,
    env: dict[str, str] | None = None,
    mounts: Mounts | None = None,
    clock: Callable[[], float] = time.monotonic,
    check: Callable[[RunResult, Case], CaseResult] | None = None,
) -> Verdict:
    """Run ``argv`` once per test case within ``budget_s`` seconds in total; ``check`` (a special
    judge, ``checker.py``) decides the cases whose program exited 0 instead of the comparison."""
    deadline = clock() + budget_s
    cases: list[CaseResult] = []
    first_run: RunResult | None = None
    for case in p.tests:
        left = deadline - clock()
        if left <= 0.05:
            cases.append(CaseResult(Status.TIMEOUT, 0.0, {"reason": "stage time budget exhausted"}))
            continue
        r = session.run(
            argv,
            limits=limits.capped(left),
            stdin=case.stdin.encode(),
            env=env,
            mounts=mounts,
        )
        if first_run is None:
            first_run = r
        res = check(r, case) if check is not None and r.ok else judge_case(r, case, p)
        cases.append(res)
        if res.status is not Status.OK and p.scoring == "all":
            break
    return verdict_of(cases, len(p.tests), first_run)


def verdict_of(cases: list[CaseResult], total: int, first_run: RunResult | None = None) -> Verdict:
    """The request's verdict from its case results: ``ok``, or the status of the first failure."""
    passed = sum(c.status is Status.OK for c in cases)
    first_bad = next((c.status for c in cases if c.status is not Status.OK), None)
    return Verdict(first_bad or Status.OK, passed, total, cases, first_run)


def score_of(v: Verdict, p: JudgedPayload) -> float:
    if p.scoring == "all":
        return 1.0 if v.passed == v.total else 0.0
    return v.fraction


def case_details(v: Verdict, keep_output_of: int = 4) -> list[dict[str, Any]]:
    """Per-case results; output snippets only for the first few failures (results stay small)."""
    out = []
    shown = 0
    for c in v.cases:
        d = c.as_dict()
        if c.status is not Status.OK:
            shown += 1
            if shown > keep_output_of:
                d.pop("stdout", None)
                d.pop("expected", None)
                d.pop("stderr", None)
        out.append(d)
    return out


# SandboxFusion keeps the first 1 MiB of each stream (sandbox/runners/base.py,
# _MAX_CAPTURED_OUTPUT_BYTES); so do we, and unlike it we say when we cut.
RAW_OUTPUT_BYTES = 1 * MiB


def raw_run(r: RunResult) -> dict[str, Any]:
    """A run as SandboxFusion reports it: each stream's first RAW_OUTPUT_BYTES, with flags saying
    whether it was cut and whether the program was stopped for writing past the capture cap."""
    code = r.exit_code if r.exit_code is not None else 128 + (r.signal or 0)
    return {
        "return_code": code,
        "timed_out": r.timed_out,
        "execution_time": round(r.wall_s, 4),
        "stdout": r.stdout[:RAW_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "stderr": r.stderr[:RAW_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "stdout_truncated": len(r.stdout) > RAW_OUTPUT_BYTES or r.stdout_truncated,
        "stderr_truncated": len(r.stderr) > RAW_OUTPUT_BYTES or r.stderr_truncated,
        "output_limit": r.termination is Termination.OUTPUT_LIMIT,
    }


def write_inputs(session: Session, p: JudgedPayload) -> None:
    """The payload's ``files``, written into the work dir before the program (which may overwrite)."""
    for name, data in p.files:
        session.write_file(name, data)


def fetch_outputs(session: Session, p: JudgedPayload) -> dict[str, str]:
    """``fetch_files`` read back after the run (base64); missing or oversized files are left out,
    as SandboxFusion leaves out missing ones."""
    out = {}
    for name in p.fetch_files:
        data = session.read_file(name, FETCH_FILE_BYTES)
        if data is not None:
            out[name] = encode_binary(data)
    return out


def verdict_output(
    v: Verdict, p: JudgedPayload, isolation: str, files: dict[str, str] | None = None, **extra: Any
) -> StageOutput:
    if p.mode == "raw" and v.first_run is not None:
        extra["run"] = raw_run(v.first_run)
    if p.fetch_files:
        extra["files"] = files or {}
    return StageOutput.final(
        v.status,
        score_of(v, p),
        passed=v.passed,
        total=v.total,
        tests=case_details(v),
        isolation=isolation,
        **extra,
    )
