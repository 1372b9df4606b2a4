"""Hostile programs through the real ``python`` and ``cpp`` handlers and the bwrap sandbox.

Each attack must end with the right status, leave no process behind, and the handler must
serve a normal request right after it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.cpp import CompileHandler, RunHandler
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox.local import BWRAP, RLIMITS, LocalSandbox
from tests.integration.sandbox.conftest import assert_no_survivors, sandbox_processes, sandbox_settings

SETTINGS = JudgeSettings(test_time_s=3.0)
ECHO = {"stdin": "ping\n", "expected_stdout": "ping"}


def _code(src: str) -> str:
    return textwrap.dedent(src).strip() + "\n"


def run_py(h: PythonRunHandler, code: str, **extra: Any) -> StageOutput:
    payload = {"code": _code(code), "tests": [extra.pop("test", ECHO)], **extra}
    return h.run(StageInput("r", "t", "python", "run", payload, timeout_s=30))


@pytest.fixture
def handler(bwrap_sandbox: LocalSandbox) -> Iterator[PythonRunHandler]:
    h = PythonRunHandler(bwrap_sandbox, SETTINGS)
    yield h
    # the handler keeps serving after every attack
    out = run_py(h, "print(input())")
    assert out.status is Status.OK and out.score == 1.0, out.detail
    assert_no_survivors()


def test_fork_bomb(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        time_limit_s=2,
    )
    assert out.status in (Status.TIMEOUT, Status.RUNTIME_ERROR)
    assert out.score == 0.0


def test_shell_fork_bomb(handler: PythonRunHandler) -> None:
    out = run_py(handler, "import os\nos.system(':(){ :|:& };:')\nprint(input())", time_limit_s=2)
    assert out.status in (Status.OK, Status.TIMEOUT, Status.RUNTIME_ERROR)


def test_infinite_loop(handler: PythonRunHandler) -> None:
    out = run_py(handler, "while True:\n    pass", time_limit_s=1)
    assert out.status is Status.TIMEOUT and out.score == 0.0


def test_memory_hog(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        chunks = []
        while True:
            chunks.append(bytearray(64 << 20))
        """,
        memory_limit_mb=256,
    )
    assert out.status is Status.MEMORY_LIMIT_EXCEEDED  # distinct from a runtime error
    assert "MemoryError" in out.detail["tests"][0]["stderr"]


def test_multi_gigabyte_output(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        import sys
        block = b"x" * (1 << 20)
        for _ in range(8 * 1024):  # 8 GiB if nothing stopped it
            sys.stdout.buffer.write(block)
        """,
        time_limit_s=3,
    )
    assert out.status is Status.RUNTIME_ERROR
    assert out.detail["tests"][0]["reason"] == "output limit exceeded"
    assert out.detail["tests"][0]["time_s"] < 3


def test_network_is_unreachable(handler: PythonRunHandler) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(srv.accept())
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        out = run_py(
            handler,
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
                print("connected")
            except OSError:
                print("blocked")
            """,
            test={"stdin": "", "expected_stdout": "blocked"},
        )
    finally:
        stop.set()
        t.join(2)
        srv.close()
    assert out.status is Status.OK, out.detail
    assert accepted == []


def test_cannot_write_outside_workdir(handler: PythonRunHandler, tmp_path: Path) -> None:
    targets = [tmp_path / "pwned", Path("/usr/pwned-by-sandbox"), Path("/etc/pwned-by-sandbox")]
    out = run_py(
        handler,
        f"""
        import os
        ok = 0
        for p in {[str(t) for t in targets]!r} + ["/pwned"]:
            try:
                with open(p, "w") as f:
                    f.write("x")
                ok += 1
            except OSError:
                pass
        with open("/tmp/scratch", "w") as f:  # the private /tmp is writable, and discarded
            f.write("x")
        print(ok)
        """,
        test={"stdin": "", "expected_stdout": "0"},
    )
    assert out.status is Status.OK, out.detail
    assert not any(t.exists() for t in targets) and not Path("/pwned").exists()


def test_cannot_read_worker_environment(handler: PythonRunHandler, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("DISTRS_TOKEN", secret)
    out = run_py(
        handler,
        f"""
        import glob, os
        seen = " ".join(f"{{k}}={{v}}" for k, v in os.environ.items())
        for p in glob.glob("/proc/*/environ"):
            try:
                seen += open(p, "rb").read().decode(errors="replace")
            except OSError:
                pass
        print("found" if {secret!r} in seen else "clean")
        """,
        test={"stdin": "", "expected_stdout": "clean"},
    )
    assert out.status is Status.OK, out.detail
    assert secret not in str(out.detail)


def test_killing_its_parent_does_not_reach_the_worker(handler: PythonRunHandler) -> None:
    out = run_py(
        handler,
        """
        import os, signal
        for pid in (os.getppid(), 1, -1):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        print(input())
        """,
    )
    # we (the "worker") are still alive to assert, and the verdict came back
    assert out.status in (Status.OK, Status.RUNTIME_ERROR)


def test_detached_daemon_is_killed(handler: PythonRunHandler) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.25"
    out = run_py(
        handler,
        f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in (0, 1, 2):
                    os.close(fd)
                os.execvp("sleep", ["sleep", {marker!r}])
            os._exit(0)
        print(input())
        """,
    )
    assert out.status is Status.OK, out.detail
    assert_no_survivors(marker)


def test_cpp_crash_and_fork_bomb(bwrap_sandbox: LocalSandbox) -> None:
    compile_h = CompileHandler(bwrap_sandbox, SETTINGS)
    run_h = RunHandler(bwrap_sandbox, SETTINGS)
    src = "#include <unistd.h>\nint main(){ while(1) fork(); }\n"
    tests = [{"stdin": "", "expected_stdout": ""}]
    c = compile_h.run(StageInput("r", "t", "cpp", "compile", {"code": src, "tests": tests}, timeout_s=60))
    assert c.outcome == "next"
    out = run_h.run(
        StageInput("r", "t", "cpp", "run", {"code": src, "tests": tests, "time_limit_s": 1}, c.artifacts, 30)
    )
    assert out.status is Status.TIMEOUT
    assert_no_survivors()


def test_rlimits_fallback_kills_daemons_as_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the fallback can only sweep a dedicated uid when started as root")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs a system python the sandbox uid can read")
    # without a mount namespace the run's uid must be able to traverse to its work dir
    base = Path(tempfile.mkdtemp(prefix="distrs-sbx-test-"))
    base.chmod(0o711)
    sb = LocalSandbox(sandbox_settings(base), RLIMITS)
    # without a mount namespace the run's uid needs an interpreter it can read on the host
    h = PythonRunHandler(sb, SETTINGS.model_copy(update={"python": "/usr/bin/python3"}))
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.75"
    try:
        out = run_py(
            h,
            f"""
        import os, subprocess
        subprocess.Popen(["setsid", "sleep", {marker!r}], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(input())
        """,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert out.status is Status.OK and out.detail["isolation"] == RLIMITS, out.detail
    assert_no_survivors(marker)


def _program_runs(marker: str) -> bool:
    return any(cmd.startswith(f"sleep {marker}") for _, cmd in sandbox_processes(marker))


def test_worker_killed_mid_run_leaves_nothing(tmp_path: Path) -> None:
    """A worker process SIGKILLed while its program runs takes the whole jail with it."""
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.125"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from distrs.sandbox import Limits
        from distrs.sandbox.local import BWRAP, LocalSandbox
        from tests.integration.sandbox.conftest import sandbox_settings
        sb = LocalSandbox(sandbox_settings(Path({str(tmp_path)!r})), BWRAP)
        with sb.session() as s:
            print("started", flush=True)
            s.run(["sleep", {marker!r}], limits=Limits(wall_s=600))
        """
    )
    root = Path(__file__).resolve().parents[3]
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"started"
        # wait for the jailed program itself, not just bwrap (whose command line has the marker
        # too): the worker is to die while its program runs
        deadline = time.monotonic() + 10
        while not _program_runs(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _program_runs(marker), "the jailed sleeper never started"
        worker.kill()
        worker.wait(10)
        assert_no_survivors(marker)
        # its session (a tmpfs where the worker may mount) is reaped by the next sandbox
        base = tmp_path / "sbx"
        if os.geteuid() != 0:
            return  # only a root worker mounts session tmpfs on the host itself
        left = list(base.glob("run-*"))
        assert left, "the killed worker's session should still be there"
        LocalSandbox(sandbox_settings(tmp_path), BWRAP)
        assert not list(base.glob("run-*"))
        assert not [m for m in Path("/proc/self/mounts").read_text().splitlines() if str(base) in m]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
