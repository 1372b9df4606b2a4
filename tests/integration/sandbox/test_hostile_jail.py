"""The red team's list against the real jail: namespaces, mounts, disk, inodes, memory, uid, secrets.

Every program here is what a hostile completion could submit; each test checks the attack fails
*and* that the handler keeps judging correctly afterwards (the ``handler`` fixture).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox import Limits, privileges
from distrs.sandbox.local import LocalSandbox
from tests.fixtures import hostile_programs as hostile
from tests.integration.sandbox.conftest import UID_BASE, UID_COUNT, assert_no_survivors

SETTINGS = JudgeSettings(test_time_s=10.0, memory_mb=512)


def run_py(h: PythonRunHandler, code: str, stdin: str = "", **extra: Any) -> StageOutput:
    src = textwrap.dedent(code).strip() + "\n"
    payload = {"code": src, "tests": [{"stdin": stdin, "expected_stdout": "safe"}], **extra}
    return h.run(StageInput("r", "t", "python", "run", payload, timeout_s=40))


@pytest.fixture
def handler(bwrap_sandbox: LocalSandbox) -> Iterator[PythonRunHandler]:
    h = PythonRunHandler(bwrap_sandbox, SETTINGS)
    yield h
    out = run_py(h, "print('safe')")
    assert out.status is Status.OK and out.score == 1.0, out.detail
    assert_no_survivors()


def test_user_namespaces_and_mount_are_refused(handler: PythonRunHandler) -> None:
    out = run_py(handler, hostile.NAMESPACES_AND_MOUNT)
    assert out.status is Status.OK, out.detail


def test_disk_fill_stops_at_the_session_quota(handler: PythonRunHandler) -> None:
    out = run_py(handler, hostile.DISK_FILL, time_limit_s=10)
    assert out.status is Status.OK, out.detail


def test_hundred_thousand_files_stop_at_the_inode_limit(handler: PythonRunHandler) -> None:
    out = run_py(handler, hostile.MANY_FILES)
    assert out.status is Status.OK, out.detail


def test_the_program_never_has_the_workers_uid(
    handler: PythonRunHandler, bwrap_sandbox: LocalSandbox
) -> None:
    out = run_py(handler, "import os; print(os.getuid(), os.geteuid(), os.getgid())")
    got = out.detail["tests"][0]["stdout"].split()
    uid = int(got[0])
    assert uid != os.getuid()
    if bwrap_sandbox.mode == privileges.POOL:  # its own uid from the pool on the host itself
        assert UID_BASE <= uid < UID_BASE + UID_COUNT
        assert got[0] == got[1] == got[2]


def test_localhost_resolves_to_the_jails_own_loopback(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        import socket
        addr = socket.gethostbyname("localhost")
        srv = socket.socket()
        srv.bind(("localhost", 0))
        srv.listen(1)
        c = socket.create_connection(("localhost", srv.getsockname()[1]), timeout=2)
        conn, _ = srv.accept()
        c.sendall(b"ok")
        print("safe" if conn.recv(2) == b"ok" and addr == "127.0.0.1" else addr)
        """,
    )
    assert out.status is Status.OK, out.detail


def test_memory_hog_across_processes_is_memory_limit_exceeded(bwrap_sandbox: LocalSandbox) -> None:
    if bwrap_sandbox.cgroups is None:
        pytest.skip("this worker may not create cgroups here: rlimits alone apply")
    # four processes of 150 MiB each stay under RLIMIT_AS (256 MiB) but exceed the cgroup
    code = textwrap.dedent(
        """
        import os, time
        for _ in range(4):
            if os.fork() == 0:
                b = bytearray(150 << 20)
                for i in range(0, len(b), 4096):
                    b[i] = 1
                time.sleep(5)
                os._exit(0)
        for _ in range(4):
            os.wait()
        print("survived")
        """
    )
    with bwrap_sandbox.session() as s:
        s.write_file("hog.py", code.encode())
        exe = os.path.realpath("/usr/bin/python3")
        r = s.run([exe, "hog.py"], limits=Limits(wall_s=20, memory_bytes=256 << 20))
    assert r.oom_killed and r.memory_exceeded, (r.describe(), r.stdout, r.stderr[-300:])
    assert_no_survivors()


def test_nothing_but_the_session_is_writable(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        wrote = []
        for p in ("/x", "/etc/x", "/dev/x", "/dev/shm/x", "/jail/x", "/usr/x"):
            try:
                open(p, "w").write("x")
                wrote.append(p)
            except OSError:
                pass
        for p in ("/tmp/x", "/jail/work/x"):
            open(p, "w").write("x")
        print("safe" if not wrote else f"wrote {wrote}")
        """,
    )
    assert out.status is Status.OK, out.detail
