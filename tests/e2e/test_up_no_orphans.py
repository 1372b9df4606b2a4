"""``distrs up`` killed while a worker is busy in a jail: no worker process outlives it.

The local actuator starts its worker hosts in sessions of their own, and every jail is a
``bwrap`` in a session of its own too, so nothing of a terminal or a process group ends them
with the service. A busy worker is the hard case: a drain lets it finish its lease (a kernel
build of minutes), so a ``distrs up`` killed during or instead of the drain must still take it
and its jails down (``distrs/worker/lifeline.py``).

Each test starts ``distrs up`` for real, submits one request whose program sleeps far past the
test in a jail (and, for ``cpp``, forks a child that leaves for a session of its own), waits
until that program runs, takes the tree of ``distrs up``'s descendants, SIGKILLs ``distrs up``
(after a SIGINT whose drain is still waiting on the busy worker, in the second test), and checks
that no process of that tree, nor any process running the program, is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from distrs.sandbox import SandboxSettings, privileges
from distrs.sandbox.factory import probe_bwrap
from tests.fixtures import processes
from tests.fixtures.processes import Proc
from tests.fixtures.service import free_port, wait_http
from tests.requirements import need

SLEEP_S = 300  # far past the test: only a kill ends these programs
BOUND_S = 90.0  # the most any wait here takes (a bound, not a measurement: a loaded CI machine)


@pytest.fixture(autouse=True, scope="module")
def _needs_gpp_and_the_jail() -> None:
    need("g++", "the cpp request compiles with it; make system-deps installs it", found=shutil.which("g++"))
    reason = probe_bwrap(SandboxSettings())
    need(
        "bubblewrap jail", "the busy worker runs its program in it", found=reason is None, detail=reason or ""
    )


def cpp_sleeper(marker: str) -> str:
    """Renames itself ``marker``, forks a child that leaves for a new session, and both sleep."""
    return (
        "#include <sys/prctl.h>\n#include <unistd.h>\n"
        "int main() {\n"
        f'  prctl(PR_SET_NAME, "{marker}");\n'
        "  if (fork() == 0) setsid();\n"
        f"  sleep({SLEEP_S});\n"
        "}\n"
    )


def python_sleeper(marker: str) -> str:
    return f"import time\nopen('/proc/self/comm', 'w').write('{marker}')\ntime.sleep({SLEEP_S})\n"


class Up:
    """A ``distrs up`` process; its stdout lines collected by a thread."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
        env["DISTRS_SANDBOX_WORKDIR_BASE"] = str(tmp / "sbx")
        env["PYTHONUNBUFFERED"] = "1"  # its lines as they are printed
        cmd = [sys.executable, "-m", "distrs.cli", "up", "--port", str(self.port), "--insecure"]
        self.proc = subprocess.Popen(
            [*cmd, "--max-workers", "2", "--log-level", "warning"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[bytes]) -> None:
        for line in out:
            self.lines.append(line.decode(errors="replace").rstrip())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def submit(self, reward_type: str, code: str) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as c:
            assert c.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": 1}).status_code == 201
            payload: dict[str, Any] = {
                "code": code,
                "tests": [{"stdin": "", "expected_stdout": ""}],
                "time_limit_s": 60,
            }
            body = {
                "task": "t",
                "batch_id": "b",
                "request_id": "r",
                "reward_type": reward_type,
                "payload": payload,
            }
            assert c.post("/v1/requests", json=body).json()["accepted"] == 1


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    u = Up(tmp_path)
    try:
        wait_http(f"{u.url}/readyz", timeout_s=60, proc=u.proc)
        yield u
    finally:
        if u.proc.poll() is None:
            u.proc.kill()
        u.proc.wait(10)
        unmount_beneath(tmp_path)


def unmount_beneath(root: Path) -> None:
    """Detach the session tmpfs a killed root worker leaves mounted (the sandbox reaps them at its
    next start over the same folder; this test's folder has none)."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in points:
        if point.startswith(f"{root}/"):
            with contextlib.suppress(OSError):
                privileges.unmount(Path(point))


def busy_tree(up: Up, marker: str, programs: int) -> list[Proc]:
    """Once ``programs`` processes named ``marker`` run: every descendant of ``distrs up``."""
    processes.wait_until(
        lambda: len(processes.named(marker)) >= programs, BOUND_S * 2, f"{programs} programs running"
    )
    procs = processes.tree(up.proc.pid)
    assert len([p for p in procs if p.name == marker]) >= programs, procs  # in the tree, by ancestry
    return procs


def assert_nothing_left(procs: list[Proc], marker: str) -> None:
    def clean() -> bool:
        return not processes.alive(procs) and not processes.named(marker)

    try:
        processes.wait_until(clean, BOUND_S, "the workers and their jails gone")
    except AssertionError:
        left = list(dict.fromkeys([*processes.alive(procs), *processes.named(marker)]))
        processes.kill_all(left)
        raise AssertionError("outlived distrs up: " + ", ".join(map(str, left))) from None


@pytest.mark.timeout(420)
def test_sigkill_leaves_no_worker_nor_jail(up: Up) -> None:
    marker = f"orph{uuid.uuid4().hex[:8]}"
    up.submit("cpp", cpp_sleeper(marker))
    procs = busy_tree(up, marker, programs=2)  # the program and its child in a session of its own
    up.proc.kill()
    up.proc.wait(10)
    assert_nothing_left(procs, marker)


@pytest.mark.timeout(420)
def test_sigkill_during_the_drain_leaves_no_worker_nor_jail(up: Up) -> None:
    marker = f"orph{uuid.uuid4().hex[:8]}"
    up.submit("python", python_sleeper(marker))
    procs = busy_tree(up, marker, programs=1)
    hosts = [p for p in procs if p.ppid == up.proc.pid]
    busy = {p.pid for p in procs if p.name == marker}
    idle = [h for h in hosts if not busy & {p.pid for p in processes.tree(h.pid)}]
    assert idle and len(idle) < len(hosts)  # other stages' hosts have nothing to finish
    up.proc.send_signal(signal.SIGINT)
    processes.wait_until(lambda: "draining workers..." in up.lines, BOUND_S, "the drain begun")
    processes.wait_until(lambda: not processes.alive(idle), BOUND_S, "the idle hosts drained")
    # The drain waits on the busy worker: its program still runs when distrs up is killed.
    assert processes.named(marker) and up.proc.poll() is None
    up.proc.kill()
    up.proc.wait(10)
    assert_nothing_left(procs, marker)
