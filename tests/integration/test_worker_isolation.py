"""A worker process keeps its token out of reach: not in its environment, not readable via /proc."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrs.worker import isolation
from tests.fixtures.service import free_port, wait_http


def test_reexec_goes_through_its_own_namespaces_only_when_not_root() -> None:
    argv = ["/venv/bin/python", "/venv/bin/distrs", "worker"]
    assert isolation.reexec_command(argv, 0, True) == argv
    assert isolation.reexec_command(argv, 10001, False) == argv
    cmd = isolation.reexec_command(argv, 10001, True)
    assert cmd[:4] == ["unshare", "--user", "--map-root-user", "--mount"] and cmd[-3:] == argv


def test_worker_drops_its_token_from_the_environment_and_is_not_dumpable(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DISTRS_TOKEN": "very-secret-worker-token",
        "DISTRS_SANDBOX_WORKDIR_BASE": str(tmp_path / "sbx"),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distrs.cli",
            "worker",
            "--stage",
            "verify",
            "--proxy",
            "http://127.0.0.1:9",
            "--health-port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)  # the re-executed worker serves
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert b"very-secret-worker-token" not in environ
        assert b"DISTRS_WORKER_ENTERED=1" in environ  # only the number of a pipe it read and closed
        # non-dumpable: its /proc entries belong to root, whatever uid it runs as
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert "Name:" in status
        st = Path(f"/proc/{proc.pid}/environ").stat()
        assert st.st_uid == 0
    finally:
        proc.terminate()
        proc.wait(20)


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
