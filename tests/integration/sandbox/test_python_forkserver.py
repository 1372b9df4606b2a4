"""The python fork server (one jail per request, a fork per case) against the real bwrap jail.

Each hostile program here targets what the fork server adds over a jail per case: state left in
the interpreter, processes left in the jail, the server's control pipes and reports, the server
itself. Every test checks the verdict (never a pass for the attack) and, where it matters, that
the next case or request is judged as on a fresh jail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.interpreter import interpreter
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import FORKSERVER_SOURCE, PythonRunHandler, forkserver_source
from distrs.sandbox import Limits, SandboxError
from distrs.sandbox.factory import probe_bwrap
from distrs.sandbox.forkserver import ForkServerSession, server_limits
from distrs.sandbox.local import BWRAP, LocalSandbox
from tests.integration.sandbox.conftest import sandbox_settings
from tests.requirements import need

SETTINGS = JudgeSettings(test_time_s=3.0)
OFF = SETTINGS.model_copy(update={"python_fork_server": False})
NO_ZYGOTE = SETTINGS.model_copy(update={"python_zygote": False})


def _src(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


def judge(h: PythonRunHandler, code: str, tests: list[dict[str, str]], **extra: Any) -> StageOutput:
    payload = {"code": _src(code), "tests": tests, **extra}
    return h.run(StageInput("r", "t", "python", "run", payload, timeout_s=30))


def _ns_depth(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) - 1
    return 1


def assert_no_survivors(within_s: float = 3.0) -> None:
    """No fork server and no process forked from one is left (their command line holds the
    server's source, and with it its protocol name; other tests' jails may share the uid range).
    A server forked from a zygote has the zygote's command line, one PID namespace deeper: the
    zygote itself lives on between requests, its forks must not."""
    deadline = time.monotonic() + within_s
    own = _ns_depth(Path("/proc/self/status").read_text())
    while True:
        left = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                cmd = (d / "cmdline").read_bytes()
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
                forked = b"zygote/1" in cmd and _ns_depth((d / "status").read_text()) > own + 1
            except (OSError, IndexError):
                continue
            if (b"forkserver/1" in cmd or forked) and state != "Z":
                left.append(int(d.name))
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"fork server processes survived: {left}")
        time.sleep(0.05)


def _sandbox(tmp: Path, **update: Any) -> LocalSandbox:
    settings = sandbox_settings(tmp).model_copy(update=update)
    reason = probe_bwrap(settings)
    need(
        "bubblewrap jail",
        "real sandboxes run untrusted programs in it",
        found=reason is None,
        detail=reason or "",
    )
    return LocalSandbox(settings, BWRAP)


@pytest.fixture(params=[True, False], ids=["proc", "no-proc"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalSandbox]:
    """The jail with and without /proc (the default in containers that mask /proc)."""
    sb = _sandbox(tmp_path, mount_proc=request.param)
    yield sb
    sb.close_zygotes()


@pytest.fixture(params=[True, False], ids=["zygote", "jail-per-request"])
def warm(request: pytest.FixtureRequest) -> JudgeSettings:
    """The fork server forked from a zygote (a root worker, or root of a user namespace of its
    own) or started in a jail of its own per request."""
    if request.param and os.geteuid() != 0:
        pytest.skip("a zygote needs a root worker (or root of a user namespace of its own)")
    return SETTINGS if request.param else NO_ZYGOTE


def _zygote_start(sb: LocalSandbox, s: Any, source: str, script_args: list[str], mounts: Any) -> Any:
    """How the python type starts a request's server from the sandbox's zygote."""
    zygote = sb.zygote(interpreter("")[0], source, mounts)
    if zygote is None:
        pytest.skip("this worker cannot fork requests from a zygote (not root)")
    return lambda limits: s.start_forked(zygote, script_args, limits=server_limits(limits))


# --- the same runs as a jail per case -------------------------------------------------------

PROGRAMS = {
    "exception": "raise ValueError('x')",
    "syntax error": "def (:",
    "exit code": "import sys; sys.exit(3)",
    "exit message": "import sys; sys.exit('bye')",
    "atexit": "import atexit; atexit.register(lambda: print('bye'))\nprint('hi')",
    "thread joined at exit": "import threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(0.1), print('late'))).start()\nprint('early')",
    "keyboard interrupt": "raise KeyboardInterrupt",
    "stdin": "import sys, os\nprint(repr(sys.stdin.read()), sys.stdin.seekable(), os.fstat(0).st_size)",
    "streams": "import sys\nfor s in (sys.stdin, sys.stdout, sys.stderr):\n"
    "    print(s.encoding, s.errors, s.line_buffering, s.write_through, s.buffer.raw.name, s.mode)",
    "main module": "import sys, __main__\nprint(__name__, sys.argv, __file__, sorted(globals()), "
    "__main__.__dict__ is globals(), __spec__, __package__, __cached__, type(__loader__).__name__, "
    "sys.flags.isolated, sys.flags.dont_write_bytecode, sys.path[:1])",
    "signals": "import signal\nprint(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGPIPE), "
    "signal.getsignal(signal.SIGXFSZ), signal.pthread_sigmask(signal.SIG_BLOCK, []))",
    "rlimits": "import resource as r\nprint([r.getrlimit(x) for x in (r.RLIMIT_CPU, r.RLIMIT_AS, "
    "r.RLIMIT_NPROC, r.RLIMIT_FSIZE, r.RLIMIT_NOFILE, r.RLIMIT_CORE)])",
    "open fds": "import os\nfds = []\nfor fd in range(64):\n    try:\n        os.fstat(fd)\n"
    "        fds.append(fd)\n    except OSError:\n        pass\nprint(fds)",
    "finalizer": "class A:\n    def __del__(self):\n        print('del')\na = A()\nprint('x')",
    "failed flush": "import os\nprint('x' * 10)\nos.close(1)",
    "memory error": "x = bytearray(2 << 30)",
    "excepthook": "import sys\nsys.excepthook = lambda t, v, tb: print('hook', t.__name__)\n1 / 0",
    "crash signal": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
    "privileges": "import os\nkeep = ('Uid', 'Gid', 'Groups', 'Cap', 'NoNewPrivs', 'Seccomp')\n"
    "print([l for l in open('/proc/self/status') if l.startswith(keep)], os.getcwd())",
    "mounts": "print(sorted((l.split()[1] + ' ' + l.split()[2] + ' ' + ','.join(sorted(set(l.split()[3]"
    ".split(',')) & {'ro', 'rw', 'nosuid', 'nodev', 'noexec'})) for l in open('/proc/self/mounts'))))",
    "environment": "import os\nprint(sorted(os.environ.items()), os.umask(0))",
    "network": "import socket\nprint(socket.if_nameindex(), socket.gethostname() != '', "
    "socket.gethostbyname('localhost'))",
}


FORKED = pytest.mark.parametrize("forked", [False, True], ids=["own-jail", "from-zygote"])


@FORKED
def test_runs_are_those_of_a_jail_per_case(tmp_path: Path, forked: bool) -> None:
    sb = _sandbox(tmp_path, cgroups=False)  # per-case runs of one pool uid wait for its cgroup
    exe, mounts = interpreter("")
    argv = [exe, "-I", "-B", "main.py"]
    limits = Limits(wall_s=5, memory_bytes=512 << 20)
    with sb.session() as s:
        start = _zygote_start(sb, s, forkserver_source(), ["main.py"], mounts) if forked else None
        runner = ForkServerSession(
            s,
            program=argv,
            server=[exe, "-I", "-B", "-c", forkserver_source(), "main.py"],
            isolation=sb.isolation,
            mounts=mounts,
            start=start,
        )
        try:
            for name, code in PROGRAMS.items():
                s.write_file("main.py", code.encode())
                a = s.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                b = runner.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                assert (b.termination, b.exit_code, b.signal, b.stdout, b.stderr) == (
                    a.termination,
                    a.exit_code,
                    a.signal,
                    a.stdout,
                    a.stderr,
                ), name
            assert runner.servers_started == 1  # one server ran every case
        finally:
            runner.close()
    assert_no_survivors()
    sb.close_zygotes()


PAYLOADS: list[tuple[str, list[dict[str, str]], dict[str, Any]]] = [
    ("a, b = map(int, input().split())\nprint(a + b)", [], {}),
    ("print(0)", [], {}),
    ("a = int(input().split()[0])\nprint(3 if a == 1 else 1 / 0)", [], {}),
    ("def (:", [], {}),
    ("exec('def (:')", [], {}),
    ("while True:\n    pass", [], {"time_limit_s": 0.5}),
    ("x = bytearray(1 << 30)", [], {"memory_limit_mb": 256}),
    ("import sys\nsys.stdout.write('x' * (5 << 20))", [], {}),
    ("print(input())", [{"stdin": "abc", "expected_stdout": "abc"}], {"mode": "raw"}),
    ("def add(a, b):\n    return a + b", [{"stdin": "1\n2", "expected_stdout": "3"}], {"fn_name": "add"}),
]
ADD = [{"stdin": "1 2\n", "expected_stdout": "3"}, {"stdin": "40 2\n", "expected_stdout": "42"}]


def _comparable(out: StageOutput) -> tuple[Any, ...]:
    tests = [
        {k: v for k, v in t.items() if k not in ("time_s", "reason")} for t in out.detail.get("tests", [])
    ]
    reasons = [str(t.get("reason", "")).split(" after ")[0] for t in out.detail.get("tests", [])]
    run = {k: v for k, v in out.detail.get("run", {}).items() if k != "execution_time"}
    return out.status, out.score, tests, reasons, run, out.detail.get("compiler_output")


def test_verdicts_are_those_of_a_jail_per_case(tmp_path: Path, warm: JudgeSettings) -> None:
    sb = _sandbox(tmp_path)
    served, cold = PythonRunHandler(sb, warm), PythonRunHandler(sb, OFF)
    for code, tests, extra in PAYLOADS:
        a = judge(cold, code, tests or ADD, **extra)
        b = judge(served, code, tests or ADD, **extra)
        assert _comparable(b) == _comparable(a), code
    truncated = judge(served, "import sys\nsys.stdout.write('x' * (5 << 20))", ADD)
    assert truncated.detail["tests"][0]["reason"] == "output limit exceeded"
    sb.close_zygotes()
    assert_no_survivors()


# --- one case never affects the next --------------------------------------------------------

POISON = """
import builtins, sys
if input().strip() == "poison":
    builtins.int = lambda *a: 0
    builtins.print = lambda *a, **k: sys.__stdout__.write("3\\n")
    sys.modules["json"] = None
    sys.modules["os"].getpid = lambda: 1
    globals()["poisoned"] = True
    import gc
    for f in gc.get_objects():  # even the server's own functions, as far as this process sees them
        if callable(f) and getattr(f, "__name__", "") in ("_collect", "_sweep", "serve", "run"):
            try:
                f.__code__ = (lambda *a, **k: None).__code__
            except (AttributeError, TypeError, ValueError):
                pass
    print("poisoned")
else:
    import json
    print(json.dumps(int("40") + 2) if "poisoned" not in globals() else "leaked")
"""


def test_a_poisoned_interpreter_does_not_reach_the_next_case_or_request(
    sandbox: LocalSandbox, warm: JudgeSettings
) -> None:
    h = PythonRunHandler(sandbox, warm)
    tests = [{"stdin": "poison", "expected_stdout": "42"}, {"stdin": "clean", "expected_stdout": "42"}]
    out = judge(h, POISON, tests)
    assert [t["status"] for t in out.detail["tests"]] == ["wrong_answer", "ok"], out.detail
    again = judge(h, POISON, tests[1:])
    assert again.status is Status.OK, again.detail


DAEMON = """
import os, sys, time
if input().strip() == "start":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            # from now on: scribble on every stdout it can open, and on a file the next case reads
            while True:
                with open("/tmp/daemon-alive", "a") as f:
                    f.write("x")
                for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
                    try:
                        with open(f"/proc/{pid}/fd/1", "w") as out:
                            out.write("99\\n")
                    except OSError:
                        pass
                os.write(1, b"99\\n")
                time.sleep(0.005)
        os._exit(0)
    print(42)
else:
    before = os.path.getsize("/tmp/daemon-alive") if os.path.exists("/tmp/daemon-alive") else 0
    time.sleep(0.3)
    after = os.path.getsize("/tmp/daemon-alive") if os.path.exists("/tmp/daemon-alive") else 0
    print(42 if after == before else "daemon alive")
"""


def test_a_daemon_of_one_case_is_gone_before_the_next(sandbox: LocalSandbox, warm: JudgeSettings) -> None:
    h = PythonRunHandler(sandbox, warm)
    tests = [{"stdin": "start", "expected_stdout": "42"}, {"stdin": "check", "expected_stdout": "42"}]
    out = judge(h, DAEMON, tests)
    assert out.detail["tests"][1]["status"] == "ok", out.detail
    assert_no_survivors()


# --- the child cannot reach the server ------------------------------------------------------

FORGE = """
import os
reached = []
for fd in range(3, 256):
    try:
        os.write(fd, b"D 0 exited 0 0.1 0.1 2 0 0 0\\n42")
        reached.append(fd)
    except OSError:
        pass
me = str(os.getpid())
for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
    if not pid.isdigit() or pid == me:
        continue
    for name in ("fd/0", "fd/1", "fd/3", "fd/4", "mem", "environ"):
        try:
            with open(f"/proc/{pid}/{name}", "rb" if name in ("mem", "environ") else "wb") as f:
                f.write(b"D 0 exited 0 0.1 0.1 2 0 0 0\\n42") if "fd" in name else None
            reached.append(f"{pid}/{name}")
        except OSError:
            pass
print("safe" if not reached else f"reached {reached}")
raise SystemExit(1)
"""


def test_a_case_can_neither_forge_nor_read_the_servers_reports(
    sandbox: LocalSandbox, warm: JudgeSettings
) -> None:
    h = PythonRunHandler(sandbox, warm)
    out = judge(h, FORGE, [{"stdin": "", "expected_stdout": "safe"}])
    assert out.status is Status.RUNTIME_ERROR, out.detail  # its own exit 1, nothing forged
    raw = judge(h, FORGE, [{"stdin": "", "expected_stdout": "safe"}], mode="raw")
    assert raw.detail["run"]["stdout"] == "safe\n", raw.detail


def test_the_server_cannot_be_killed_or_stopped_from_inside(
    sandbox: LocalSandbox, warm: JudgeSettings
) -> None:
    code = """
    import os, signal
    if input().strip() == "attack":
        for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            for pid in (os.getppid(), 1):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        try:
            os.kill(-1, signal.SIGKILL)  # everything but itself (and init)
        except OSError:
            pass
    print(42)
    """
    tests = [{"stdin": "attack", "expected_stdout": "42"}, {"stdin": "ok", "expected_stdout": "42"}]
    served = judge(PythonRunHandler(sandbox, warm), code, tests)
    cold = judge(PythonRunHandler(sandbox, OFF), code, tests)
    assert (
        [t["status"] for t in served.detail["tests"]]
        == ["ok", "ok"]
        == [t["status"] for t in cold.detail["tests"]]
    )
    assert_no_survivors()


def _hostile_server(replace: str, by: str) -> str:
    src = FORKSERVER_SOURCE.read_text()
    assert replace in src
    return src.replace(replace, by, 1)


REPORT = "        _write_all(ctl_out, head.encode() + out + err)\n"
FORGED_REPORTS = [
    '        _write_all(ctl_out, b"D 0 exited 0 0.1 0.1 2 0 0 0\\n42")\n',  # another request's id
    '        _write_all(ctl_out, head.replace("exited", "fine").encode() + out + err)\n',
    '        _write_all(ctl_out, head.replace(f" {len(out)} ", " 999999999 ", 1).encode() + out)\n',
    '        _write_all(ctl_out, b"garbage\\n")\n',
    '        _write_all(ctl_out, b"x" * 100000)\n',
]


@pytest.mark.parametrize("forged", FORGED_REPORTS)
@FORKED
def test_anything_malformed_from_the_server_is_a_sandbox_failure(
    tmp_path: Path, forged: str, forked: bool
) -> None:
    sb = _sandbox(tmp_path, cgroups=False)
    exe, mounts = interpreter("")
    argv = [exe, "-I", "-B", "main.py"]
    source = _hostile_server(REPORT, forged)
    with sb.session() as s:
        s.write_file("main.py", b"print(42)\n")
        runner = ForkServerSession(
            s,
            program=argv,
            server=[exe, "-I", "-B", "-c", source, "main.py"],
            isolation=sb.isolation,
            mounts=mounts,
            start=_zygote_start(sb, s, source, ["main.py"], mounts) if forked else None,
        )
        try:
            with pytest.raises(SandboxError):
                runner.run(argv, limits=Limits(wall_s=3), stdin=b"", mounts=mounts)
        finally:
            runner.close()
    assert_no_survivors()
    sb.close_zygotes()


def _hostile_runner(
    s: Any, sb: LocalSandbox, by: str, forked: bool
) -> tuple[ForkServerSession, list[str], Any]:
    exe, mounts = interpreter("")
    argv = [exe, "-I", "-B", "main.py"]
    source = _hostile_server(REPORT, by)
    runner = ForkServerSession(
        s,
        program=argv,
        server=[exe, "-I", "-B", "-c", source, "main.py"],
        isolation=sb.isolation,
        mounts=mounts,
        start=_zygote_start(sb, s, source, ["main.py"], mounts) if forked else None,
    )
    return runner, argv, mounts


@FORKED
def test_a_server_that_dies_mid_case_fails_that_case_and_is_replaced(tmp_path: Path, forked: bool) -> None:
    sb = _sandbox(tmp_path, cgroups=False)
    with sb.session() as s:
        s.write_file("main.py", b"print(42)\n")
        runner, argv, mounts = _hostile_runner(s, sb, "        os._exit(0)\n", forked)
        try:
            first = runner.run(argv, limits=Limits(wall_s=3), stdin=b"", mounts=mounts)
            assert not first.ok and first.exit_code == 1 and b"test runner" in first.stderr
            assert runner.run(argv, limits=Limits(wall_s=3), stdin=b"", mounts=mounts).stdout == b""
            assert runner.servers_started == 2  # a fresh server (and jail) for the next case
        finally:
            runner.close()
    assert_no_survivors()
    sb.close_zygotes()


@FORKED
def test_a_server_that_stalls_is_killed_at_the_hosts_deadline(tmp_path: Path, forked: bool) -> None:
    sb = _sandbox(tmp_path, cgroups=False)
    with sb.session() as s:
        s.write_file("main.py", b"print(42)\n")
        runner, argv, mounts = _hostile_runner(s, sb, "        time.sleep(3600)\n", forked)
        try:
            r = runner.run(argv, limits=Limits(wall_s=0.5), stdin=b"", mounts=mounts)
            assert r.timed_out and r.stdout == b""
        finally:
            runner.close()
    assert_no_survivors()
    sb.close_zygotes()


def test_the_server_refuses_to_run_outside_a_pid_namespace() -> None:
    src = FORKSERVER_SOURCE.read_text()
    r = subprocess.run(
        [sys.executable, "-I", "-B", "-c", src, "main.py"],
        input=b"",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert r.returncode != 0 and b"not the init of a PID namespace" in r.stderr
    assert not r.stdout.startswith(b"H ")


def test_the_setting_turns_it_off(tmp_path: Path) -> None:
    sb = _sandbox(tmp_path)
    # the same program and arguments either way; only a fork of the server has its modules
    code = "import os, sys\nprint(sys.orig_argv[3:], sys.argv, os.getppid(), 'ctypes' in sys.modules)"
    tests = [{"stdin": "", "expected_stdout": "x"}]
    on = judge(PythonRunHandler(sb, SETTINGS), code, tests, mode="raw")
    off = judge(PythonRunHandler(sb, OFF), code, tests, mode="raw")
    assert on.detail["run"]["stdout"] == "['main.py'] ['main.py'] 1 True\n"
    assert off.detail["run"]["stdout"] == "['main.py'] ['main.py'] 1 False\n"


def test_one_zygote_serves_every_request_and_its_setting_turns_it_off(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a zygote needs a root worker (or root of a user namespace of its own)")
    sb = _sandbox(tmp_path)
    exe, mounts = interpreter("")
    code = "import os\nprint(os.getppid(), os.getuid() != 0)"
    tests = [{"stdin": "", "expected_stdout": "x"}]
    zygote = sb.zygote(exe, forkserver_source(), mounts)
    assert zygote is not None
    try:
        for _ in range(3):
            out = judge(PythonRunHandler(sb, NO_ZYGOTE), code, tests, mode="raw")
            assert out.detail["run"]["stdout"] == "1 True\n"
        assert zygote.started == 0
        for _ in range(3):
            out = judge(PythonRunHandler(sb, SETTINGS), code, tests, mode="raw")
            assert out.detail["run"]["stdout"] == "1 True\n"  # a fork of a server that is pid 1
        assert zygote.started == 1
        assert_no_survivors()
    finally:
        sb.close_zygotes()


def test_a_zygote_that_dies_mid_case_is_a_sandbox_failure_and_is_started_afresh(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a zygote needs a root worker (or root of a user namespace of its own)")
    sb = _sandbox(tmp_path)
    exe, mounts = interpreter("")
    zygote = sb.zygote(exe, forkserver_source(), mounts)
    assert zygote is not None
    h = PythonRunHandler(sb, SETTINGS)
    code = "import time\nprint(open('/dev/stdin').read().strip())\ntime.sleep(30)"
    killer = threading.Timer(2.0, zygote.close)  # a zygote killed from outside, its requests with it
    killer.start()
    try:
        with pytest.raises(SandboxError, match="zygote died"):  # internal_error, never the program's
            judge(h, code, [{"stdin": "x", "expected_stdout": "x"}], time_limit_s=20)
        assert_no_survivors()
        out = judge(h, "print(input())", [{"stdin": "42", "expected_stdout": "42"}])
        assert out.status is Status.OK and zygote.started == 2, out.detail
    finally:
        killer.cancel()
        sb.close_zygotes()


# What one request may try to leave for the next: files in its work dir and /tmp, a daemon (in
# a session of its own, ignoring SIGTERM), its environment, a SysV shared memory segment, a POSIX
# one, a listening unix socket in the abstract namespace, a pseudo-terminal. The check reports
# each one it finds; within one request (one session, one server) the files are meant to be seen.
LEAK = """
import ctypes, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x5EED
found = []
if input().strip() == "plant":
    for path in ("/tmp/planted", "planted"):
        with open(path, "w") as f:
            f.write("x")
    os.environ["PLANTED"] = "1"
    os.putenv("PLANTED", "1")
    shmid = libc.shmget(KEY, 4096, 0o1666)
    if shmid >= 0:
        addr = libc.shmat(shmid, None, 0)
    try:
        fd = os.open("/dev/shm/planted", os.O_CREAT | os.O_RDWR, 0o666)
        os.write(fd, b"x")
    except OSError:
        pass
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\\0distrs-planted")
            s.listen(8)
            try:
                master = os.open("/dev/ptmx", os.O_RDWR)
            except OSError:
                pass
            while True:
                with open("/tmp/daemon-alive", "a") as f:
                    f.write("x")
                time.sleep(0.005)
        os._exit(0)
    time.sleep(0.2)
    print(42)
else:
    for path in ("/tmp/planted", "planted", "/dev/shm/planted"):
        if os.path.exists(path):
            found.append(path)
    before = os.path.getsize("/tmp/daemon-alive") if os.path.exists("/tmp/daemon-alive") else 0
    time.sleep(0.2)
    if os.path.exists("/tmp/daemon-alive") and os.path.getsize("/tmp/daemon-alive") != before:
        found.append("daemon")
    if "PLANTED" in os.environ:
        found.append("environment")
    if libc.shmget(KEY, 0, 0) >= 0:
        found.append("sysv shm")
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("\\0distrs-planted")
        found.append("abstract socket")
    except OSError:
        pass
    if os.path.isdir("/dev/pts") and [p for p in os.listdir("/dev/pts") if p.isdigit()]:
        found.append("pty")
    if os.path.isdir("/proc"):
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
        if others:
            found.append(f"processes {others}")
    print(42 if not found else f"found {found}")
"""


def test_nothing_a_request_leaves_reaches_the_next(sandbox: LocalSandbox, warm: JudgeSettings) -> None:
    h = PythonRunHandler(sandbox, warm)
    plant, check = {"stdin": "plant", "expected_stdout": "42"}, {"stdin": "check", "expected_stdout": "42"}
    same = judge(h, LEAK, [plant, check], mode="raw")
    # the check sees what it looks for: within one request (one session, one server's
    # namespaces) the files and the shared memory segment stay
    seen = same.detail["tests"][1]["stdout"]
    assert all(x in seen for x in ("'/tmp/planted'", "'planted'", "'sysv shm'")), same.detail
    first = judge(h, LEAK, [plant])
    assert first.status is Status.OK, first.detail
    second = judge(h, LEAK, [check], mode="raw")
    assert second.detail["run"]["stdout"] == "42\n", second.detail
    assert_no_survivors()


# --- the non-root modes ----------------------------------------------------------------------

NONROOT_SCRIPT = """
import json, sys
from distrs.sandbox import SandboxSettings
from distrs.sandbox.local import LocalSandbox, BWRAP
from distrs.rewards.python_reward import PythonRunHandler
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.base import StageInput
sb = LocalSandbox(SandboxSettings(workdir_base=sys.argv[1], mount_proc=sys.argv[2] == "1"), BWRAP)
h = PythonRunHandler(sb, JudgeSettings(test_time_s=3.0))
cases = json.loads(sys.stdin.read())
out = []
for code, tests in cases:
    r = h.run(StageInput("r", "t", "python", "run", {"code": code, "tests": tests}, timeout_s=30))
    out.append([t["status"] for t in r.detail["tests"]])
print(json.dumps({"mode": sb.mode, "verdicts": out}))
"""


@pytest.mark.parametrize("private", [False, True], ids=["plain", "private"])
@pytest.mark.parametrize("proc", [True, False], ids=["proc", "no-proc"])
def test_non_root_workers(request: pytest.FixtureRequest, private: bool, proc: bool) -> None:
    """A non-root worker (``plain``) and one in a user namespace of its own (``private``)."""
    if os.geteuid() != 0:
        pytest.skip("switches to an unprivileged uid: needs root")
    system = "/usr/bin/python3"
    version = subprocess.run(
        [system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if version.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip("needs a system python of this version that an unprivileged uid can run")
    root = Path(__file__).resolve().parents[3]
    site = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    base = Path(tempfile.mkdtemp(prefix="distrs-fs-nonroot-"))  # pytest's tmp is root-only
    base.chmod(0o777)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    script = base / "judge.py"
    script.write_text(NONROOT_SCRIPT)
    script.chmod(0o644)
    cases = [
        (
            _src(POISON),
            [{"stdin": "poison", "expected_stdout": "42"}, {"stdin": "clean", "expected_stdout": "42"}],
        ),
        (
            _src(DAEMON),
            [{"stdin": "start", "expected_stdout": "42"}, {"stdin": "check", "expected_stdout": "42"}],
        ),
        (_src(FORGE), [{"stdin": "", "expected_stdout": "safe"}]),
    ]
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if private:
        cmd += ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--"]
    cmd += [system, str(script), str(base / "sbx"), "1" if proc else "0"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": f"{root}:{site}"}
    r = subprocess.run(
        cmd, input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=300, check=False
    )
    if r.returncode != 0 and "Permission denied" in r.stderr:
        pytest.skip(f"the unprivileged uid cannot read this checkout: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["mode"] == ("private" if private else "plain")
    poison, daemon, forge = got["verdicts"]
    assert poison == ["wrong_answer", "ok"] and daemon[1] == "ok" and forge == ["runtime_error"]
    assert_no_survivors()


def test_a_zygote_serves_an_interpreter_whose_prefix_lies_under_tmp(tmp_path: Path) -> None:
    """A checkout (or venv) under /tmp: the request's own /tmp would hide the interpreter's prefix,
    so each server puts the zygote's read-only binds below /tmp back on top of it, as bubblewrap
    binds them after its /tmp. Every run is still that of a jail per case."""
    if os.geteuid() != 0:
        pytest.skip("a zygote needs a root worker (or root of a user namespace of its own)")
    venv = Path(tempfile.mkdtemp(prefix="distrs-zygote-venv-", dir="/tmp"))
    try:
        subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        venv.chmod(0o755)
        exe, mounts = interpreter(str(venv / "bin" / "python"))
        assert any(p.startswith("/tmp/") for p in mounts.ro_paths), mounts
        sb = _sandbox(tmp_path, cgroups=False)
        argv = [exe, "-I", "-B", "main.py"]
        limits = Limits(wall_s=5, memory_bytes=512 << 20)
        programs = {
            **PROGRAMS,
            "prefix": "import sys, os\nprint(sys.prefix, os.access(sys.prefix, os.W_OK))\n"
            "open('/tmp/mine', 'w').write('x')\nprint(sorted(os.listdir('/tmp')))",
        }
        with sb.session() as s:
            zygote = sb.zygote(exe, forkserver_source(), mounts)
            assert zygote is not None
            runner = ForkServerSession(
                s,
                program=argv,
                server=[exe, "-I", "-B", "-c", forkserver_source(), "main.py"],
                isolation=sb.isolation,
                mounts=mounts,
                start=lambda lim: s.start_forked(zygote, ["main.py"], limits=server_limits(lim)),
            )
            try:
                for name, code in programs.items():
                    s.write_file("main.py", code.encode())
                    a = s.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                    b = runner.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                    assert (b.termination, b.exit_code, b.stdout, b.stderr) == (
                        a.termination,
                        a.exit_code,
                        a.stdout,
                        a.stderr,
                    ), name
                    if name == "prefix":
                        assert b.stdout.startswith(f"{venv} False\n".encode()), b.stdout
                assert runner.servers_started == 1
            finally:
                runner.close()
        assert_no_survivors()
        sb.close_zygotes()
    finally:
        shutil.rmtree(venv, ignore_errors=True)
