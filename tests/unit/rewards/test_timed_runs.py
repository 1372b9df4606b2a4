"""Timed re-runs of passed cases (judge/timing.py): fresh sessions, each run judged, the fastest
charged, the stage budget never charged to the program."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import InvalidPayload
from distrs.rewards.judge.cases import CaseResult, Verdict
from distrs.rewards.judge.payload import Case, JudgedPayload, parse_payload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.judge.timing import time_cases
from distrs.sandbox import Limits, RunResult, Termination


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Runs:
    """Sessions whose runs take the listed wall times and print the listed outputs, in order."""

    def __init__(self, clock: Clock, walls: Sequence[float], outs: Sequence[str] | None = None) -> None:
        self.clock = clock
        self.walls = list(walls)
        self.outs = list(outs) if outs is not None else None
        self.opened = 0
        self.prepared: list[int] = []
        self.limits: list[float] = []

    @contextmanager
    def session(self) -> Iterator[Any]:
        self.opened += 1
        yield self

    def prepare(self, s: Any) -> None:
        self.prepared.append(self.opened)

    def run(self, argv: Sequence[str], *, limits: Limits, stdin: bytes = b"", **_: Any) -> RunResult:
        wall = self.walls.pop(0)
        self.limits.append(limits.wall_s)
        self.clock.t += min(wall, limits.wall_s)
        if wall > limits.wall_s:
            return RunResult(Termination.TIMEOUT, None, None, b"", b"", limits.wall_s, 0.0)
        out = self.outs.pop(0) if self.outs is not None else stdin.decode()
        return RunResult(Termination.EXITED, 0, None, out.encode(), b"", wall, 0.0)

    @property
    def path(self) -> Path:
        return Path("/nonexistent")


def payload(n: int = 2, scoring: str = "fraction") -> JudgedPayload:
    return JudgedPayload(
        code="x",
        tests=tuple(Case(f"{i}\n", f"{i}\n") for i in range(n)),
        scoring=scoring,
        reference_time_s=1.0,
    )


def passed(*times: float) -> Verdict:
    return Verdict(Status.OK, len(times), len(times), [CaseResult(Status.OK, t) for t in times])


def timed(
    runs: Runs, p: JudgedPayload, v: Verdict, n: int, budget: float = 100.0, wall: float = 10.0
) -> Verdict:
    return time_cases(
        runs.session,
        runs.prepare,
        ["./b"],
        p,
        v,
        Limits(wall_s=wall),
        n,
        runs.clock() + budget,
        clock=runs.clock,
    )


def test_fastest_timed_run_is_charged_and_each_runs_in_a_fresh_prepared_session() -> None:
    runs = Runs(Clock(), [0.50, 0.40, 0.45, 0.30, 0.31, 0.29])
    v = timed(runs, payload(), passed(0.9, 0.8), 3)
    assert v.status is Status.OK and v.passed == 2
    assert [c.time_s for c in v.cases] == [0.40, 0.29]
    assert v.cases[0].detail == {"timed_runs": 3, "first_run_s": 0.9}
    assert runs.opened == 6 and runs.prepared == [1, 2, 3, 4, 5, 6]


def test_zero_runs_change_nothing() -> None:
    runs = Runs(Clock(), [])
    v = passed(0.9)
    assert timed(runs, payload(1), v, 0) is v and runs.opened == 0


def test_a_wrong_timed_run_fails_the_case() -> None:
    runs = Runs(Clock(), [0.3] * 4, outs=["0\n", "7\n", "1\n", "1\n"])
    v = timed(runs, payload(), passed(0.5, 0.5), 2)
    assert v.status is Status.WRONG_ANSWER and v.passed == 1
    assert v.cases[0].status is Status.WRONG_ANSWER and v.cases[0].detail["failed_on_timed_run"] == 2
    assert v.cases[1].status is Status.OK and v.cases[1].detail["timed_runs"] == 2


def test_failed_cases_are_not_rerun_and_all_scoring_stops_at_a_failure() -> None:
    runs = Runs(Clock(), [0.3])
    v = Verdict(Status.WRONG_ANSWER, 1, 2, [CaseResult(Status.WRONG_ANSWER, 0.5), CaseResult(Status.OK, 0.5)])
    out = timed(runs, payload(), v, 1)
    assert out.cases[0].status is Status.WRONG_ANSWER and out.cases[1].time_s == 0.3
    assert timed(Runs(Clock(), []), payload(scoring="all"), v, 3) is v


def test_no_room_left_keeps_the_judged_run_and_says_so() -> None:
    runs = Runs(Clock(), [0.3] * 4)
    v = timed(runs, payload(1), passed(1.0), 3, budget=1.5)
    assert runs.opened == 0 and v.cases[0].time_s == 1.0 and v.cases[0].detail == {"timed_runs": 0}


def test_a_run_cut_by_the_stage_budget_is_not_charged() -> None:
    """The second timed run would take 3 s; the budget lowered its limit below the case's own
    10 s, so the timeout is the service's: not charged, timing stops, the first timed run stands."""
    runs = Runs(Clock(), [0.5, 3.0, 0.5])
    v = timed(runs, payload(1), passed(0.5), 3, budget=2.0)
    assert v.status is Status.OK and v.cases[0].time_s == 0.5 and v.cases[0].detail["timed_runs"] == 1
    assert runs.limits[1] < 10.0 and len(runs.walls) == 1


def test_a_timeout_under_the_cases_own_limit_is_charged() -> None:
    runs = Runs(Clock(), [0.5, 3.0])
    v = timed(runs, payload(1), passed(0.5), 3, wall=2.0)
    assert v.status is Status.TIMEOUT and v.cases[0].detail["failed_on_timed_run"] == 2


@pytest.mark.parametrize("bad", [-1, 11, 1.5, True, "3"])
def test_timed_runs_field_is_checked(bad: object) -> None:
    with pytest.raises(InvalidPayload) as e:
        parse_payload(
            {"code": "x", "tests": [{"stdin": "", "expected_stdout": ""}], "timed_runs": bad}, JudgeSettings()
        )
    assert e.value.field == "timed_runs"


def test_timed_runs_default_depends_on_the_score_using_speed() -> None:
    from distrs.rewards.cuda import ExecuteHandler

    h = ExecuteHandler(settings=JudgeSettings(timed_runs=4))
    base = {"code": "x", "tests": [{"stdin": "", "expected_stdout": ""}]}
    s = JudgeSettings()
    assert h.timed_runs(parse_payload({**base, "reference_time_s": 1.0}, s)) == 4
    assert h.timed_runs(parse_payload(base, s)) == 0
    assert h.timed_runs(parse_payload({**base, "timed_runs": 2}, s)) == 2
    assert h.timed_runs(parse_payload({**base, "reference_time_s": 1.0, "timed_runs": 0}, s)) == 0
