"""The in-jail exec timer (sandbox/exec_timer.py) in the real jail: the program's own time, its
status passed through, and a program of the same uid unable to forge or reach the report."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from distrs.rewards.interpreter import interpreter
from distrs.sandbox import Limits, Mounts, RunResult
from distrs.sandbox.exec_timer import RETRY_AFTER_S, ExecTimer, TimedSession
from distrs.sandbox.local import RLIMITS, LocalSandbox
from distrs.sandbox.session_wrapper import SessionWrapper
from tests.integration.sandbox.conftest import sandbox_settings

LIMITS = Limits(wall_s=10)

# Sleeps 0.3 s, then tries to reach its parent (the timer): write a forged report into each of
# its fds through /proc, and attach to it with ptrace. Prints how many of those worked.
HOSTILE = r"""
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <unistd.h>
#include <sys/ptrace.h>
int main() {
  timespec t{0, 300000000}; nanosleep(&t, nullptr);
  int got = 0; pid_t pp = getppid();
  for (int fd = 0; fd < 64; ++fd) {
    char path[64]; std::snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pp, fd);
    int f = open(path, O_WRONLY);
    if (f >= 0) { if (write(f, "1\n", 2) == 2) ++got; close(f); }
  }
  if (ptrace(PTRACE_ATTACH, pp, nullptr, nullptr) == 0) ++got;
  std::printf("reached=%d\n", got);
}
"""

EXIT3 = "int main(){ return 3; }"
SEGV = "int main(){ volatile int* p = nullptr; *p = 1; }"
KILL_TIMER = r"""
#include <csignal>
#include <unistd.h>
int main(){ kill(getppid(), SIGKILL); return 0; }
"""


def build(tmp: Path, name: str, src: str) -> bytes:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    (tmp / f"{name}.cpp").write_text(src)
    subprocess.run(["g++", "-O1", "-o", str(tmp / name), str(tmp / f"{name}.cpp")], check=True)
    return (tmp / name).read_bytes()


@pytest.fixture(scope="module")
def timer() -> ExecTimer:
    return ExecTimer(interpreter, own_pid_namespace=True)


class Counting(SessionWrapper):
    """Counts the runs that reach the jail."""

    runs = 0

    def run(self, argv: Sequence[str], **kw: Any) -> RunResult:
        self.runs += 1
        return super().run(argv, **kw)


def run(sb: LocalSandbox, timer: ExecTimer | None, binary: bytes) -> tuple[TimedSession, Any]:
    with sb.session() as s:
        ts = TimedSession(Counting(s), timer)
        ts.write_file("b", binary, executable=True)
        return ts, ts.run(["./b"], limits=LIMITS)


def jail_runs(ts: TimedSession) -> int:
    return ts._session.runs  # type: ignore[attr-defined]


def test_a_program_of_the_same_uid_cannot_reach_its_timer(
    bwrap_sandbox: LocalSandbox, timer: ExecTimer, tmp_path: Path
) -> None:
    ts, r = run(bwrap_sandbox, timer, build(tmp_path, "hostile", HOSTILE))
    assert r.ok and r.stdout == b"reached=0\n", (r.stdout, r.stderr)
    assert ts.timed_runs == 1 and 0.3 <= r.wall_s < 1.0


def test_the_program_time_leaves_the_jails_start_out(
    bwrap_sandbox: LocalSandbox, timer: ExecTimer, tmp_path: Path
) -> None:
    binary = build(tmp_path, "exit0", "int main(){}")
    timed = [run(bwrap_sandbox, timer, binary)[1].wall_s for _ in range(3)]
    host = [run(bwrap_sandbox, None, binary)[1].wall_s for _ in range(3)]
    assert max(timed) < min(host), (timed, host)


def test_exit_code_and_signal_pass_through(
    bwrap_sandbox: LocalSandbox, timer: ExecTimer, tmp_path: Path
) -> None:
    ts, r = run(bwrap_sandbox, timer, build(tmp_path, "exit3", EXIT3))
    assert r.exit_code == 3 and ts.timed_runs == 1
    ts, r = run(bwrap_sandbox, timer, build(tmp_path, "segv", SEGV))
    assert r.signal == signal.SIGSEGV and not r.ok, r


def test_a_program_that_kills_its_timer_is_charged_on_the_hosts_clock(
    bwrap_sandbox: LocalSandbox, timer: ExecTimer, tmp_path: Path
) -> None:
    ts, r = run(bwrap_sandbox, timer, build(tmp_path, "killer", KILL_TIMER))
    assert not r.ok and ts.timed_runs == 0 and ts.host_runs == 1


def test_a_timer_that_cannot_start_is_the_services_fault_and_is_taken_out_for_a_while(
    bwrap_sandbox: LocalSandbox, tmp_path: Path
) -> None:
    now = [0.0]
    broken = ExecTimer(
        lambda: ("/nonexistent/python3", Mounts()), own_pid_namespace=True, clock=lambda: now[0]
    )
    binary = build(tmp_path, "exit3", EXIT3)
    ts, r = run(bwrap_sandbox, broken, binary)  # tried, failed, run again without it
    assert r.exit_code == 3 and ts.host_runs == 1 and jail_runs(ts) == 2 and broken.broken is not None
    now[0] = RETRY_AFTER_S - 1  # taken out: not tried
    ts, r = run(bwrap_sandbox, broken, binary)
    assert r.exit_code == 3 and ts.host_runs == 1 and jail_runs(ts) == 1
    now[0] = RETRY_AFTER_S + 1  # tried again (and taken out again)
    ts, r = run(bwrap_sandbox, broken, binary)
    assert r.exit_code == 3 and jail_runs(ts) == 2 and broken.broken is not None


def test_without_namespaces_the_timer_times_and_kills_nothing_of_the_workers(tmp_path: Path) -> None:
    """The degraded rlimits backend: no PID namespace of the jail's own, so the timer must not
    kill(-1) (that would reach the worker's processes); it still times the program."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("the fallback runs a dedicated uid only as root, with a python that uid can read")
    base = Path(tempfile.mkdtemp(prefix="distrs-sbx-test-"))
    base.chmod(0o711)
    try:
        sb = LocalSandbox(sandbox_settings(base), RLIMITS)
        timer = ExecTimer(lambda: ("/usr/bin/python3", Mounts()), own_pid_namespace=False)
        ts, r = run(sb, timer, build(tmp_path, "exit3", EXIT3))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert r.exit_code == 3 and ts.timed_runs == 1 and timer.broken is None, r
