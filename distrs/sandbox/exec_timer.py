"""A program's own run time, measured inside its jail: from its exec to its exit.

``RunResult.wall_s`` is the host's clock around the whole jail: bwrap's namespaces and mounts,
the uid switch, the rlimits, and the jail's end. For a speed-scored program that start is charged
to the program and, on a loaded machine, is most of a short program's noise (a 20 ms program:
CV 0.13 in the jail against 0.02 as a plain subprocess, ``benchmarks/cuda_timing.py``).

:class:`TimedSession` wraps a session: each run starts the program under the timer of
``exec_timer_child.py`` (a python of the worker's, ``-I -S``), which reports the program's own
time through a pipe only the host reads, and the run's ``wall_s`` becomes that time. Where no
whole report comes back (the timer could not make itself safe, or the program killed it), or
the report is not a time within the host's own wall time, the host's wall time stands: a
program can make its charge larger by attacking the timer, never smaller. A timer that wrote
nothing never started the program (the service's fault, not the program's): the run is made
again without it, and so are the later ones for a while (``ExecTimer.broken``); so are they where
the interpreter cannot be found. ``timed_runs`` and
``host_runs`` count which clock each run was charged by.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from distrs.sandbox.base import Limits, Mounts, RunResult, SandboxError, Session, merge_mounts
from distrs.sandbox.session_wrapper import SessionWrapper

CHILD_SOURCE = Path(__file__).with_name("exec_timer_child.py")
REPORT_BYTES = 64
RETRY_AFTER_S = 600.0

log = logging.getLogger(__name__)


class ExecTimer:
    """The interpreter that runs the timer in a jail, and the host paths it needs there, from
    ``locate`` (e.g. ``rewards.interpreter.Interpreter.get``) on first use.

    ``broken`` says why the timer is not used for now: once ``locate`` failed, or the timer failed
    to start a program (it wrote nothing: the interpreter missing in the jail, or unable to start
    under the run's limits), runs go on without it, on the host's clock, for ``RETRY_AFTER_S``;
    then it is tried again. So a request whose limits starve the timer degrades the worker's
    timing for a while, not for good, and a worker whose jail lacks the interpreter pays one extra
    run per period."""

    def __init__(
        self,
        locate: Callable[[], tuple[str, Mounts]],
        *,
        own_pid_namespace: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._locate = locate
        self._located = False
        self.python = ""
        self.mounts = Mounts()
        self.own_pid_namespace = own_pid_namespace  # the bwrap jail: the timer may kill(-1)
        self.broken: str | None = None
        self._broken_at = 0.0
        self._clock = clock
        self._source = CHILD_SOURCE.read_text()

    def usable(self) -> bool:
        """False while the timer is taken out after a failure (``broken``); asks ``locate`` for
        the interpreter until it has it."""
        if self.broken is not None and self._clock() - self._broken_at >= RETRY_AFTER_S:
            self.broken = None
        if self.broken is None and not self._located:
            try:
                self.python, self.mounts = self._locate()
                self._located = True
            except (OSError, subprocess.SubprocessError, ValueError) as e:
                self.fail(f"its interpreter could not be asked: {e}")
        return self.broken is None

    def fail(self, why: str) -> None:
        self.broken = why
        self._broken_at = self._clock()
        log.warning("exec timer: %s; the host's clock times runs for %.0f s", self.broken, RETRY_AFTER_S)

    def argv(self, fd: int, program: Sequence[str]) -> list[str]:
        ns = "1" if self.own_pid_namespace else "0"
        return [self.python, "-I", "-S", "-c", self._source, str(fd), ns, *program]


def program_time(report: bytes, host_wall_s: float) -> float | None:
    """The timer's report (``S<ns>\\n``) as seconds; None unless it is whole and gives a time no
    longer than the host's own wall time of the run."""
    if len(report) > REPORT_BYTES or not report.startswith(b"S") or not report.endswith(b"\n"):
        return None
    digits = report[1:-1]
    if not digits.isdigit():
        return None
    s = int(digits) / 1e9
    return s if 0 < s <= host_wall_s else None


def read_report(fd: int) -> bytes:
    """What is in the pipe now (the timer has ended, so no more is coming); never blocks."""
    os.set_blocking(fd, False)
    out = b""
    try:
        while len(out) <= REPORT_BYTES:
            chunk = os.read(fd, REPORT_BYTES + 1)
            if not chunk:
                break
            out += chunk
    except BlockingIOError:
        pass
    return out


class TimedSession(SessionWrapper):
    """A session whose runs are charged the program's own time where the timer reports it (no
    timer: every run on the host's clock, counted)."""

    def __init__(self, inner: Session, timer: ExecTimer | None) -> None:
        super().__init__(inner)
        self._timer = timer
        self.timed_runs = 0
        self.host_runs = 0

    def run(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> RunResult:
        timer = self._timer
        if timer is None or not timer.usable():
            self.host_runs += 1
            return super().run(argv, limits=limits, stdin=stdin, env=env, mounts=mounts, fds=fds)
        r: RunResult | None = None
        r_fd, w_fd = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                r = self._session.run(
                    timer.argv(w_fd, argv),
                    limits=limits,
                    stdin=stdin,
                    env=env,
                    mounts=merge_mounts(mounts, timer.mounts),
                    fds=(*fds, w_fd),
                )
            except SandboxError as e:  # the timer's interpreter could not be started in the jail
                why = str(e)
            finally:
                os.close(w_fd)
            report = read_report(r_fd)
        finally:
            os.close(r_fd)
        if r is not None and (r.timed_out or report):
            t = None if r.timed_out else program_time(report, r.wall_s)
            if t is None:  # timed out, run untimed, or the program stopped the timer
                self.host_runs += 1
                return r
            self.timed_runs += 1
            return replace(r, wall_s=t)
        if r is not None:
            why = f"{r.describe()}: {r.stderr[-400:].decode(errors='replace')}"
        timer.fail(f"the timer did not start the program ({why})")
        return self.run(argv, limits=limits, stdin=stdin, env=env, mounts=mounts, fds=fds)
