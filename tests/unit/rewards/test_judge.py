"""Payload validation, per-case verdicts, the stage time budget and scoring (fake sandbox)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import InvalidPayload
from distrs.rewards.compare import Compare
from distrs.rewards.judge.cases import judge_case, run_tests, score_of, verdict_output
from distrs.rewards.judge.limits import case_limits, limit_cuts
from distrs.rewards.judge.payload import Case, JudgedPayload, parse_payload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits, RunResult, Termination

S = JudgeSettings()
GOOD = {"code": "print(1)", "tests": [{"stdin": "", "expected_stdout": "1"}]}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "payload"),
        ({"tests": GOOD["tests"]}, "code"),
        ({**GOOD, "code": "   "}, "code"),
        ({**GOOD, "code": "a\x00b"}, "code"),
        ({**GOOD, "code": "x" * (S.max_code_bytes + 1)}, "code"),
        ({"code": "x"}, "tests"),
        ({"code": "x", "tests": []}, "tests"),
        ({"code": "x", "tests": {"stdin": ""}}, "tests"),
        ({"code": "x", "tests": ["a"]}, "tests[0]"),
        ({"code": "x", "tests": [{"stdin": 1, "expected_stdout": ""}]}, "tests[0].stdin"),
        ({"code": "x", "tests": [GOOD["tests"][0], {"stdin": ""}]}, "tests[1].expected_stdout"),
        ({"code": "x", "tests": [GOOD["tests"][0]] * (S.max_tests + 1)}, "tests"),
        ({**GOOD, "compare": "fuzzy"}, "compare"),
        ({**GOOD, "scoring": "best"}, "scoring"),
        ({**GOOD, "float_tol": -1}, "float_tol"),
        ({**GOOD, "float_tol": "0.1"}, "float_tol"),
        ({**GOOD, "reference_time_s": 0}, "reference_time_s"),
        ({**GOOD, "reference_time_s": True}, "reference_time_s"),
        ({**GOOD, "time_limit_s": float("inf")}, "time_limit_s"),
        ({**GOOD, "memory_limit_mb": -5}, "memory_limit_mb"),
    ],
)
def test_invalid_payload_names_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidPayload) as e:
        parse_payload(payload, S)
    assert e.value.field == field
    out = e.value.output()
    assert out.status is Status.INVALID and out.score == 0.0
    assert out.detail["error"]["field"] == field and out.detail["error"]["message"]


def test_valid_payload_defaults() -> None:
    p = parse_payload(GOOD, S)
    assert p.compare is Compare.TOKENS and p.scoring == "fraction" and p.reference_time_s is None
    assert p.tests == (Case("", "1"),)
    p2 = parse_payload({**GOOD, "compare": "float", "float_tol": 0.5, "scoring": "all"}, S)
    assert p2.compare is Compare.FLOAT and p2.float_tol == 0.5 and p2.scoring == "all"


def test_payload_lowers_time_and_sets_memory_up_to_the_cap() -> None:
    low = case_limits(parse_payload({**GOOD, "time_limit_s": 0.5, "memory_limit_mb": 64}, S), S, Limits())
    assert low.wall_s == 0.5 and low.memory_bytes == 64 << 20
    high = case_limits(
        parse_payload({**GOOD, "time_limit_s": 1e6, "memory_limit_mb": 1 << 30}, S), S, Limits()
    )
    assert high.wall_s == S.max_test_time_s and high.memory_bytes == S.max_memory_mb << 20
    raised_time = case_limits(parse_payload({**GOOD, "time_limit_s": 50}, S), S, Limits())
    assert raised_time.wall_s == 50 > S.test_time_s  # honoured above the default, up to the ceiling
    assert high.output_bytes == S.output_bytes
    raised = case_limits(parse_payload({**GOOD, "memory_limit_mb": 2048}, S), S, Limits())
    assert raised.memory_bytes == 2048 << 20  # SandboxFusion's memory_limit_MB is the limit
    default = case_limits(parse_payload(GOOD, S), S, Limits())
    assert default.memory_bytes == S.memory_mb << 20


@pytest.mark.parametrize(
    ("extra", "stage_timeout", "compiles", "expected"),
    [
        ({"time_limit_s": 50}, 60.0, False, []),
        ({"time_limit_s": 100}, 120.0, False, [("time_limit_s", 100, 60, "DISTRS_JUDGE_MAX_TEST_TIME_S")]),
        (
            {"time_limit_s": 50},
            30.0,
            False,
            [("time_limit_s", 50, 28.25, "stages.run.timeout_s (pipelines: 30 s)")],
        ),
        (
            {"compile_time_limit_s": 90},
            120.0,
            True,
            [("compile_time_limit_s", 90, 60, "DISTRS_JUDGE_COMPILE_TIME_S")],
        ),
        ({"compile_time_limit_s": 90}, 120.0, False, []),  # compiled at another stage: not this one's to say
        ({}, 10.0, True, []),  # nothing asked, nothing cut
    ],
)
def test_limit_cuts_name_the_setting(
    extra: dict[str, Any], stage_timeout: float, compiles: bool, expected: list[tuple[str, float, float, str]]
) -> None:
    p = parse_payload({**GOOD, **extra}, S)
    got = limit_cuts(p, S, "run", stage_timeout, compiles=compiles).get("limits_cut", [])
    assert [(c["field"], c["requested_s"], c["effective_s"], c["setting"]) for c in got] == expected


def _run(
    term: Termination = Termination.EXITED, out: bytes = b"1\n", code: int | None = 0, sig: int | None = None
):
    return RunResult(term, code, sig, out, b"boom", 0.1, 0.1)


P = JudgedPayload(code="x", tests=(Case("", "1"),))


@pytest.mark.parametrize(
    ("run", "status"),
    [
        (_run(), Status.OK),
        (_run(out=b"2\n"), Status.WRONG_ANSWER),
        (_run(code=1), Status.RUNTIME_ERROR),
        (_run(Termination.SIGNALED, code=None, sig=signal.SIGSEGV), Status.RUNTIME_ERROR),
        (_run(Termination.SIGNALED, code=None, sig=signal.SIGXCPU), Status.TIMEOUT),
        (_run(Termination.TIMEOUT, code=None), Status.TIMEOUT),
        (_run(Termination.OUTPUT_LIMIT, code=None), Status.RUNTIME_ERROR),
    ],
)
def test_judge_case_status(run: RunResult, status: Status) -> None:
    assert judge_case(run, P.tests[0], P).status is status


def test_wrong_answer_keeps_only_snippets() -> None:
    res = judge_case(_run(out=b"x" * 100_000), P.tests[0], P)
    assert res.status is Status.WRONG_ANSWER
    assert len(res.detail["stdout"]) < 1000 and res.detail["expected"] == "1"


class FakeSession:
    """Answers each run from a script; records the limits it was given."""

    def __init__(self, results: list[RunResult], clock: list[float], cost_s: float) -> None:
        self.results = results
        self.clock = clock
        self.cost_s = cost_s
        self.walls: list[float] = []

    @property
    def path(self) -> Path:
        return Path("/nonexistent")

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        raise AssertionError("not used")

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        raise AssertionError("not used")

    def run(self, argv: Sequence[str], *, limits: Limits, **_: Any) -> RunResult:
        self.walls.append(limits.wall_s)
        self.clock[0] += min(self.cost_s, limits.wall_s)
        return self.results.pop(0)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")


def _payload(n: int, scoring: str = "fraction") -> JudgedPayload:
    return JudgedPayload(code="x", tests=tuple(Case("", "1") for _ in range(n)), scoring=scoring)


def test_fraction_scoring_runs_every_case() -> None:
    clock = [0.0]
    s = FakeSession([_run(), _run(out=b"0"), _run(), _run(code=1)], clock, 0.1)
    p = _payload(4)
    v = run_tests(s, ["p"], p, Limits(wall_s=5), budget_s=100, clock=lambda: clock[0])
    assert [c.status for c in v.cases] == [Status.OK, Status.WRONG_ANSWER, Status.OK, Status.RUNTIME_ERROR]
    assert v.status is Status.WRONG_ANSWER  # the first failing case decides
    assert score_of(v, p) == 0.5
    out = verdict_output(v, p, "bwrap")
    assert out.detail["passed"] == 2 and out.detail["total"] == 4 and len(out.detail["tests"]) == 4


def test_all_scoring_stops_at_first_failure() -> None:
    clock = [0.0]
    s = FakeSession([_run(), _run(code=1), _run()], clock, 0.1)
    p = _payload(3, "all")
    v = run_tests(s, ["p"], p, Limits(wall_s=5), budget_s=100, clock=lambda: clock[0])
    assert len(v.cases) == 2 and s.results  # third case never ran
    assert score_of(v, p) == 0.0 and v.status is Status.RUNTIME_ERROR
    ok = run_tests(FakeSession([_run()], [0.0], 0.1), ["p"], _payload(1, "all"), Limits(), 100)
    assert score_of(ok, _payload(1, "all")) == 1.0 and ok.status is Status.OK


def test_stage_budget_caps_each_case_and_times_out_the_rest() -> None:
    clock = [0.0]
    timeouts = [_run(Termination.TIMEOUT, code=None) for _ in range(5)]
    s = FakeSession(timeouts, clock, cost_s=4.0)
    v = run_tests(s, ["p"], _payload(5), Limits(wall_s=4), budget_s=10, clock=lambda: clock[0])
    assert s.walls == [4, 4, 2]  # the third case only gets what is left of the stage budget
    assert [c.status for c in v.cases] == [Status.TIMEOUT] * 5
    assert v.cases[4].detail["reason"] == "stage time budget exhausted"


def test_python_compile_error_detection() -> None:
    from distrs.rewards.judge.cases import CaseResult, Verdict
    from distrs.rewards.python_reward import compile_error_of

    def v(stderr: str, status: Status = Status.RUNTIME_ERROR) -> Verdict:
        return Verdict(status, 0, 1, [CaseResult(status, 0.1, {"stderr": stderr})])

    syntax = '  File "/jail/work/main.py", line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax\n'
    assert compile_error_of(v(syntax)) == syntax
    indent = '  File "/jail/work/main.py", line 2\n    x\nIndentationError: unexpected indent\n'
    assert compile_error_of(v(indent)) is not None
    late = 'Traceback (most recent call last):\n  File "<string>", line 1\nSyntaxError: invalid syntax\n'
    assert compile_error_of(v(late)) is None
    assert compile_error_of(v("ValueError: x")) is None
    assert compile_error_of(v(syntax, Status.WRONG_ANSWER)) is None


def test_raw_mode_reports_the_first_run() -> None:
    with pytest.raises(InvalidPayload) as e:
        parse_payload({**GOOD, "mode": "verbose"}, S)
    assert e.value.field == "mode"
    p = parse_payload({**GOOD, "mode": "raw"}, S)
    s = FakeSession([_run(out=b"hello\n", code=3)], [0.0], 0.1)
    v = run_tests(s, ["p"], p, Limits(), 100)
    run = verdict_output(v, p, "bwrap").detail["run"]
    assert run["return_code"] == 3 and run["stdout"] == "hello\n" and run["stderr"] == "boom"
    assert run["timed_out"] is False
    crash = run_tests(
        FakeSession([_run(Termination.SIGNALED, code=None, sig=signal.SIGSEGV)], [0.0], 0.1),
        ["p"],
        p,
        Limits(),
        100,
    )
    assert verdict_output(crash, p, "bwrap").detail["run"]["return_code"] == 128 + signal.SIGSEGV
    judged = parse_payload(GOOD, S)
    assert (
        "run"
        not in verdict_output(
            run_tests(FakeSession([_run()], [0.0], 0.1), ["p"], judged, Limits(), 100), judged, "x"
        ).detail
    )


def test_nested_files_and_absolute_fetch_files_are_accepted() -> None:
    """SandboxFusion's shapes: files at nested relative paths, fetch_files absolute or nested."""
    p = parse_payload({**GOOD, "files": {"dir1/dir2/f": "aGk="}, "fetch_files": ["/mnt/b", "out/c.txt"]}, S)
    assert p.files == (("dir1/dir2/f", b"hi"),) and p.fetch_files == ("/mnt/b", "out/c.txt")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"files": {"../x": "aGk="}}, "files"),
        ({"files": {"/abs": "aGk="}}, "files"),
        ({"files": {"a/./b": "aGk="}}, "files"),
        ({"files": {"a": "aGk=", "a/b": "aGk="}}, "files"),
        ({"files": {"a": "%%%"}}, "files.a"),
        ({"files": {"a": 3}}, "files.a"),
        ({"files": ["a"]}, "files"),
        ({"fetch_files": ["/etc/../passwd"]}, "fetch_files"),
        ({"fetch_files": ["a\\..\\b"]}, "fetch_files"),
        ({"fetch_files": "out.txt"}, "fetch_files"),
        ({"compile_time_limit_s": -1}, "compile_time_limit_s"),
    ],
)
def test_bad_files_name_the_field(extra: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidPayload) as e:
        parse_payload({**GOOD, **extra}, S)
    assert e.value.field == field


def test_files_decode_and_none_is_skipped() -> None:
    p = parse_payload({**GOOD, "files": {"in.txt": "aGk=", "gone": None}, "fetch_files": ["out.txt"]}, S)
    assert p.files == (("in.txt", b"hi"),) and p.fetch_files == ("out.txt",)


def test_limit_cuts_carry_the_compile_stages_cuts() -> None:
    p = parse_payload({**GOOD, "compile_time_limit_s": 90, "time_limit_s": 100}, S)
    compile_cut = limit_cuts(p, S, "compile", 120.0, compiles=True, runs=False)["limits_cut"]
    assert [c["field"] for c in compile_cut] == ["compile_time_limit_s"]
    import json

    both = limit_cuts(p, S, "run", 120.0, earlier=json.dumps(compile_cut))["limits_cut"]
    assert [c["field"] for c in both] == ["compile_time_limit_s", "time_limit_s"]
    assert limit_cuts(p, S, "run", 120.0, earlier="not json")["limits_cut"][0]["field"] == "time_limit_s"
