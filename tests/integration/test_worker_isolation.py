"""A worker process keeps its token out of reach: not in its environment, not readable via /proc
(the real ``distrs worker``, run as an unprivileged uid, checked from another process of that uid)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from distrs.worker import isolation
from tests.fixtures.service import free_port, wait_http
from tests.requirements import need


def test_reexec_goes_through_its_own_namespaces_only_when_not_root() -> None:
    argv = ["/venv/bin/python", "/venv/bin/distrs", "worker"]
    assert isolation.reexec_command(argv, 0, True) == argv
    assert isolation.reexec_command(argv, 10001, False) == argv
    cmd = isolation.reexec_command(argv, 10001, True)
    assert cmd[:4] == ["unshare", "--user", "--map-root-user", "--mount"] and cmd[-3:] == argv


UID = 63190  # an unprivileged uid no other test uses
SYSTEM_PYTHON = "/usr/bin/python3"


def as_uid(*cmd: str) -> list[str]:
    return ["/usr/bin/setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", *cmd]


@pytest.mark.parametrize("private", [False, True], ids=["plain", "own-user-namespace"])
def test_the_real_worker_as_an_unprivileged_uid_drops_its_token_and_is_not_dumpable(private: bool) -> None:
    """``distrs worker`` started as an unprivileged uid (as in a pod): its token is not in its
    environment. ``plain`` (no ``unshare``, as where the pod's seccomp profile refuses user
    namespaces): its /proc entries belong to root and another process of the *same* uid cannot
    read them, while it reads those of an ordinary (dumpable) process of that uid, so the refusal
    is the worker's non-dumpable mark, not a difference of uid. ``own-user-namespace``: the worker
    re-executed into a user namespace of its own; there the namespace's root is the worker's uid,
    so what keeps the sandboxed programs out is their own uid and dropped capabilities (the
    sandbox tests), not this mark."""
    need("root", "the test switches to an unprivileged uid", found=os.geteuid() == 0)
    need("setpriv", "starts the worker as an unprivileged uid", found=os.path.exists("/usr/bin/setpriv"))
    if private:
        need("unshare", "the worker re-executes into a user namespace of its own with it")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    need(
        f"{SYSTEM_PYTHON} {sys.version_info[0]}.{sys.version_info[1]}",
        "an interpreter the unprivileged uid can run, of the venv's version",
        found=version.stdout.strip() == str(sys.version_info[:2]),
    )
    root = Path(__file__).resolve().parents[2]
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    base = Path(tempfile.mkdtemp(prefix="distrs-iso-"))  # pytest's tmp is root-only
    os.chown(base, UID, UID)
    port = free_port()
    env = {
        # without unshare on PATH the worker stays in the host's user namespace (plain)
        "PATH": "/usr/bin:/bin" if private else str(base),
        "HOME": str(base),
        "PYTHONPATH": f"{root}:{site}",
        "DISTRS_TOKEN": "very-secret-worker-token",
        "DISTRS_SANDBOX_WORKDIR_BASE": str(base / "sbx"),
    }
    cmd = as_uid(SYSTEM_PYTHON, "-m", "distrs.cli", "worker", "--stage", "verify",
                 "--proxy", "http://127.0.0.1:9", "--health-port", str(port))  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    plain = subprocess.Popen(as_uid("/usr/bin/sleep", "60"), env=env)  # an ordinary process of that uid
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)  # the re-executed worker serves
        status = Path(f"/proc/{proc.pid}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert uids == [str(UID)] * 4, status  # it really runs as the unprivileged uid
        assert b"very-secret-worker-token" not in Path(f"/proc/{proc.pid}/environ").read_bytes()
        own_ns = os.readlink(f"/proc/{proc.pid}/ns/user") != os.readlink("/proc/self/ns/user")
        assert own_ns is private
        if private:
            return

        def read_as_uid(pid: int) -> subprocess.CompletedProcess[bytes]:
            cmd = as_uid("/usr/bin/cat", f"/proc/{pid}/environ")
            return subprocess.run(cmd, capture_output=True, timeout=30)

        assert os.stat(f"/proc/{plain.pid}/environ").st_uid == UID  # dumpable: its uid's
        assert os.stat(f"/proc/{proc.pid}/environ").st_uid == 0  # non-dumpable: root's
        control = read_as_uid(plain.pid)
        assert control.returncode == 0 and b"DISTRS_TOKEN=very-secret" in control.stdout  # dumpable: readable
        probe = read_as_uid(proc.pid)
        assert probe.returncode != 0 and b"Permission denied" in probe.stderr, probe
        assert probe.stdout == b""
    finally:
        plain.kill()
        plain.wait(10)
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(base, ignore_errors=True)


def test_non_dumpable_after_enter() -> None:
    code = (
        "import ctypes, os\n"
        "os.environ['DISTRS_WORKER_ENTERED'] = '1'\n"
        "from distrs.worker import isolation\n"
        "assert isolation.enter() is None\n"
        "libc = ctypes.CDLL(None)\n"
        "print(libc.prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "0"


def test_token_reaches_the_reexecuted_process_through_a_pipe_only(tmp_path: Path) -> None:
    if not hasattr(ctypes, "CDLL"):
        pytest.skip("no ctypes")
    code = (
        "import os, sys\n"
        "from distrs.worker import isolation\n"
        "tok = isolation.enter()\n"
        "print(tok, os.environ.get('DISTRS_TOKEN'), open(f'/proc/{os.getpid()}/environ','rb').read().count(b'tok-123'))\n"
    )
    script = tmp_path / "w.py"
    script.write_text(code)
    env = {**os.environ, "DISTRS_TOKEN": "tok-123"}
    env.pop(isolation.ENTERED_ENV, None)
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tok-123", "None", "0"], (out.stdout, time.monotonic() - start)
