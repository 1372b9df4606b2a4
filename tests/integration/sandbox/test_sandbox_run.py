"""The bwrap sandbox itself: I/O, limits, classification, isolation of env/fs/uid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from distrs.sandbox import Limits, SandboxError, SandboxSettings, Termination, create_sandbox
from distrs.sandbox.local import RLIMITS, LocalSandbox
from tests.integration.sandbox.conftest import UID_BASE, UID_COUNT, assert_no_survivors

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(not os.path.exists(PY), reason="needs /usr/bin/python3")


def test_stdin_stdout_exit_code(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(
            ["sh", "-c", "read a b; echo $((a+b)); echo err >&2; exit 3"], limits=Limits(), stdin=b"2 5\n"
        )
    assert r.termination is Termination.EXITED and r.exit_code == 3
    assert r.stdout == b"7\n" and r.stderr == b"err\n" and r.isolation == "bwrap"


def test_large_stdin_is_delivered(bwrap_sandbox: LocalSandbox) -> None:
    data = os.urandom(3 << 20)
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "wc -c"], limits=Limits(), stdin=data)
    assert r.ok and r.stdout.strip() == str(len(data)).encode()


def test_crash_is_reported_as_signal(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "kill -SEGV $$"], limits=Limits())
    assert r.termination is Termination.SIGNALED and r.signal == signal.SIGSEGV and not r.timed_out


def test_wall_limit_kills_sleeper(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(["sleep", "30.1357"], limits=Limits(wall_s=0.5))
    assert r.termination is Termination.TIMEOUT and r.timed_out and r.wall_s < 5
    assert_no_survivors("30.1357")


def test_cpu_limit_stops_busy_loop(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "while :; do :; done"], limits=Limits(wall_s=20, cpu_s=1))
    assert r.timed_out and r.termination is Termination.SIGNALED and r.signal == signal.SIGXCPU


def test_output_is_capped_and_run_stopped(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(
            ["sh", "-c", "yes xxxxxxxxxxxxxxxxxxxxxxxx"], limits=Limits(wall_s=20, output_bytes=1 << 20)
        )
    assert r.termination is Termination.OUTPUT_LIMIT and r.stdout_truncated
    assert len(r.stdout) == 1 << 20 and r.wall_s < 10


def test_environment_is_scrubbed(bwrap_sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRS_TOKEN", "very-secret-token")
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"], limits=Limits())
    assert r.ok and b"very-secret-token" not in r.stdout
    names = {ln.split(b"=")[0] for ln in r.stdout.splitlines() if b"=" in ln}
    assert b"DISTRS_TOKEN" not in names and b"PATH" in names


def test_workdir_is_private_writable_and_removed(bwrap_sandbox: LocalSandbox, tmp_path: Path) -> None:
    with bwrap_sandbox.session() as s:
        s.write_file("in.txt", b"hello")
        r = s.run(["sh", "-c", "cat in.txt > out.txt; pwd"], limits=Limits())
        assert r.ok and s.read_file("out.txt", 100) == b"hello"
        assert (s.path.stat().st_mode & 0o777) == 0o700
        path = s.path
    assert not path.exists()


def test_read_file_refuses_symlinks_and_oversize(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(
            ["sh", "-c", "ln -s /etc/hostname prog; mkfifo fifo; head -c 2000 /dev/zero > big"],
            limits=Limits(),
        )
        assert r.ok
        assert s.read_file("prog", 1 << 20) is None  # a symlink to a host file is never followed
        assert s.read_file("fifo", 1 << 20) is None
        assert s.read_file("big", 1000) is None and s.read_file("big", 2000) == bytes(2000)
        assert s.read_file("missing", 10) is None


def test_file_size_limit(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "head -c 5000000 /dev/zero > f"], limits=Limits(fsize_bytes=1 << 20))
        assert not r.ok
        assert (s.path / "f").stat().st_size <= 1 << 20


def test_unprivileged_uid_and_no_capabilities(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(["sh", "-c", "id -u; grep CapEff /proc/self/status"], limits=Limits())
    uid_line, cap_line = r.stdout.decode().splitlines()
    if os.geteuid() == 0:
        assert UID_BASE <= int(uid_line) < UID_BASE + UID_COUNT
    assert cap_line.split()[1] == "0000000000000000"


def test_only_system_dirs_are_visible(bwrap_sandbox: LocalSandbox) -> None:
    with bwrap_sandbox.session() as s:
        r = s.run(
            ["sh", "-c", "ls /; ls /home /root /var 2>&1; touch /usr/x 2>&1; echo done"], limits=Limits()
        )
    top = set(r.stdout.decode().split())
    assert "home" not in top and "var" not in top
    assert b"Read-only file system" in r.stdout


def test_a_uid_without_a_passwd_entry_still_has_a_user_name(bwrap_sandbox: LocalSandbox) -> None:
    """getpass.getuser() (which torch's profiler reaches) fails on a pool uid with no passwd
    entry unless the environment names the user."""
    with bwrap_sandbox.session() as s:
        r = s.run(["python3", "-c", "import getpass; print(getpass.getuser())"], limits=Limits())
    assert r.exit_code == 0, r.stderr
    assert r.stdout == b"sandbox\n"


def test_concurrent_sessions_get_distinct_uids(bwrap_sandbox: LocalSandbox) -> None:
    if os.geteuid() != 0:
        pytest.skip("uid pool is used only as root")
    with bwrap_sandbox.session() as a, bwrap_sandbox.session() as b:
        assert a.uid != b.uid  # type: ignore[attr-defined]


def test_sandbox_failure_is_a_sandbox_error(tmp_path: Path) -> None:
    settings = SandboxSettings(workdir_base=str(tmp_path / "sbx"), bwrap="/nonexistent/bwrap")
    with pytest.raises(SandboxError, match="SANDBOX UNAVAILABLE"):
        create_sandbox(settings.model_copy(update={"backend": "bwrap"}))
    with pytest.raises(SandboxError, match="SANDBOX UNAVAILABLE"):
        create_sandbox(settings)  # auto never weakens the jail on its own


def test_degraded_rlimits_backend_when_allowed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = SandboxSettings(
        workdir_base=str(tmp_path / "sbx"),
        bwrap="/nonexistent/bwrap",
        uid_base=UID_BASE,
        uid_count=UID_COUNT,
        allow_degraded=True,
    )
    sb = create_sandbox(settings)
    assert sb.isolation == RLIMITS
    assert "SANDBOX DEGRADED" in caplog.text
    with sb.session() as s:
        r = s.run(["sh", "-c", "cat; exit 4"], limits=Limits(), stdin=b"abc")
        assert r.exit_code == 4 and r.stdout == b"abc" and r.isolation == RLIMITS
        t = s.run(["sleep", "20.2468"], limits=Limits(wall_s=0.3))
        assert t.termination is Termination.TIMEOUT
    assert_no_survivors("20.2468")
