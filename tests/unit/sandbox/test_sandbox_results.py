"""Limits arithmetic and how a run's ending is classified."""

from __future__ import annotations

import signal

from distrs.sandbox.base import Limits, RunResult, Termination


def _r(term: Termination, code: int | None = 0, sig: int | None = None) -> RunResult:
    return RunResult(term, code, sig, b"", b"", 1.0, 0.5)


def test_capped_never_raises_a_limit() -> None:
    lim = Limits(wall_s=10, cpu_s=4)
    assert lim.capped(3).wall_s == 3 and lim.capped(3).cpu_s == 3
    assert lim.capped(30).wall_s == 10 and lim.capped(30).cpu_s == 4
    assert Limits(wall_s=5).capped(2).effective_cpu_s == 2


def test_cpu_limit_signals_count_as_timeouts() -> None:
    assert _r(Termination.SIGNALED, None, signal.SIGXCPU).timed_out
    assert _r(Termination.SIGNALED, None, signal.SIGKILL).timed_out
    assert _r(Termination.TIMEOUT, None).timed_out
    assert not _r(Termination.SIGNALED, None, signal.SIGSEGV).timed_out
    assert not _r(Termination.EXITED, 1).timed_out


def test_ok_and_describe() -> None:
    assert _r(Termination.EXITED, 0).ok and not _r(Termination.EXITED, 3).ok
    assert _r(Termination.EXITED, 3).describe() == "exit 3"
    assert _r(Termination.SIGNALED, None, signal.SIGSEGV).describe() == "signal SIGSEGV"
    assert _r(Termination.TIMEOUT, None).describe().startswith("timeout after")
    assert _r(Termination.OUTPUT_LIMIT, None).describe() == "output limit exceeded"
