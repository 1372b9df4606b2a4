"""Stateful sessions in the real jail: REPL semantics, state kept across execs, limits over the
whole session, cut execs that say whether the state survived, and hostile sessions that try to
reach another session's files and processes, the network and the worker's secrets."""

from __future__ import annotations

import os
import socket
import textwrap
from collections.abc import Iterator

import pytest

from distrs.core.sessions import Language, SessionLimits
from distrs.sandbox.local import LocalSandbox
from distrs.sandbox.stateful import SessionDead, StatefulSession
from tests.integration.sandbox.conftest import assert_no_survivors


@pytest.fixture
def py(bwrap_sandbox: LocalSandbox) -> Iterator[StatefulSession]:
    s = StatefulSession.open(bwrap_sandbox, Language.PYTHON, SessionLimits(), {"data/in.txt": b"hello"})
    yield s
    s.close()


@pytest.fixture
def sh(bwrap_sandbox: LocalSandbox) -> Iterator[StatefulSession]:
    s = StatefulSession.open(bwrap_sandbox, Language.BASH, SessionLimits())
    yield s
    s.close()


def test_python_keeps_globals_and_imports_and_shows_the_trailing_value(py: StatefulSession) -> None:
    assert py.forked  # forked from the warm zygote, not a jail and an interpreter per session
    assert py.exec("import math\nx = 40")["value"] is None
    r = py.exec("y = x + 2\nmath.sqrt(y * y)")
    assert r["value"] == "42.0" and r["error"] is None and r["state_survived"]
    assert py.exec("_ + 1")["value"] == "43.0"  # `_` is the last value, as in Jupyter
    assert py.exec("print(y)\ny;")["value"] is None  # a trailing ; shows nothing
    assert py.exec("print(y)\ny;")["stdout"] == "42\n"
    assert py.exec("None")["value"] is None
    assert py.exec("'a' * 3")["value"] == "'aaa'"  # the repr
    assert py.exec("import sys\nsys.stdin.read()", stdin="given")["value"] == "'given'"
    assert py.exec("open('data/in.txt').read()")["value"] == "'hello'"


def test_python_error_has_type_message_and_the_cells_traceback(py: StatefulSession) -> None:
    py.exec("def f(n):\n    return 1 / n")
    r = py.exec("print('before')\nf(0)")
    err = r["error"]
    assert r["stdout"] == "before\n" and r["value"] is None
    assert err["type"] == "ZeroDivisionError" and err["message"] == "division by zero"
    assert "<cell-" in err["traceback"] and "return 1 / n" in err["traceback"]
    assert "session_child" not in err["traceback"]  # none of the kernel's own frames
    syntax = py.exec("def (")["error"]
    assert syntax["type"] == "SyntaxError"
    assert py.exec("f(2)")["value"] == "0.5"  # the error left the state alone


def test_python_stderr_and_subprocess_output_are_captured(py: StatefulSession) -> None:
    r = py.exec("import subprocess, sys\nprint('e', file=sys.stderr)\nsubprocess.run(['echo', 'child'])")
    assert r["stderr"] == "e\n" and r["stdout"] == "child\n"


def test_bash_keeps_cwd_environment_variables_and_functions(sh: StatefulSession) -> None:
    assert sh.exec("mkdir -p d && cd d && export E=env; V=var; f() { echo fn $1; }")["exit_code"] == 0
    r = sh.exec("pwd; echo $E $V; f x; bash -c 'echo $E'")
    assert r["stdout"] == "/jail/work/d\nenv var\nfn x\nenv\n" and r["exit_code"] == 0
    assert sh.exec("false")["exit_code"] == 1
    assert sh.exec("cat", stdin="in")["stdout"] == "in"
    assert sh.exec("echo 'unbalanced")["exit_code"] == 2  # a syntax error ends only the exec
    assert sh.exec("echo $V")["stdout"] == "var\n"
    assert sh.state()["cwd"] == "/jail/work/d"


def test_bash_exit_restarts_the_shell_and_says_the_state_is_lost(sh: StatefulSession) -> None:
    sh.exec("V=1; echo x > kept.txt")
    r = sh.exec("exit 3")
    assert r["exit_code"] == 3 and r["state_survived"] is False and r["error"]["type"] == "KernelDied"
    r = sh.exec("echo v=$V; cat kept.txt")
    assert r["stdout"] == "v=\nx\n" and r["state_survived"] is False  # the next call says so too
    assert sh.exec("true")["state_survived"] is True


def test_files_written_and_read_from_the_host_side(py: StatefulSession) -> None:
    py.write_file("/jail/work/src/m.py", b"K = 7\n")
    assert py.exec("import sys; sys.path.insert(0, 'src'); import m; m.K")["value"] == "7"
    py.exec("open('out.txt', 'w').write('made'); open('/tmp/t.txt', 'w').write('tmp')")
    assert py.read_file("out.txt", 100) == b"made"
    assert py.read_file("/tmp/t.txt", 100) == b"tmp"
    assert py.read_file("out.txt", 2) is None  # over the size asked for
    py.exec("import os; os.symlink('/etc/passwd', 'link')")
    assert py.read_file("link", 10_000) is None  # never through a symlink the session planted
    listed = {f["path"]: f["kind"] for f in py.list_files()}
    assert listed["out.txt"] == "file" and listed["link"] == "link" and listed["src/m.py"] == "file"
    with pytest.raises(ValueError):
        py.write_file("../escape", b"x")


def test_a_timeout_interrupts_and_keeps_the_state(py: StatefulSession) -> None:
    py.exec("x = 1")
    r = py.exec("while True:\n    x += 1", timeout_s=0.5)
    assert r["timed_out"] and r["error"]["type"] == "TimeoutError" and r["state_survived"]
    assert py.exec("x > 1")["value"] == "True"


def test_a_timeout_that_cannot_interrupt_kills_and_says_the_state_is_lost(py: StatefulSession) -> None:
    py.exec("x = 1\nopen('f', 'w').write('kept')")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    r = py.exec(code, timeout_s=0.5)
    assert r["timed_out"] and r["state_survived"] is False and "lost" in r["error"]["message"]
    nxt = py.exec("open('f').read()")
    assert nxt["value"] == "'kept'" and nxt["state_survived"] is False and nxt["restarts"] == 1
    assert py.exec("'x' in globals()")["value"] == "False"
    assert py.exec("1")["state_survived"] is True


def test_bash_timeout_interrupts_the_running_command(sh: StatefulSession) -> None:
    sh.exec("V=kept")
    r = sh.exec("sleep 30; echo never", timeout_s=0.5)
    assert r["timed_out"] and r["state_survived"] and "never" not in r["stdout"]
    assert sh.exec("echo $V")["stdout"] == "kept\n"


def test_cpu_per_exec_and_in_total(bwrap_sandbox: LocalSandbox) -> None:
    limits = SessionLimits(exec_cpu_s=0.3, total_cpu_s=1.0)
    s = StatefulSession.open(bwrap_sandbox, Language.PYTHON, limits)
    try:
        r = s.exec("x = 0\nwhile True:\n    x += 1", timeout_s=30)
        assert r["timed_out"] and "CPU" in r["error"]["message"] and r["state_survived"]
        assert r["cpu_s"] >= 0.3 and r["ended"] is None
        ended = None
        for _ in range(5):  # the total runs out after a few more
            r = s.exec("while True:\n    x += 1", timeout_s=30)
            if r["ended"]:
                ended = r["ended"]
                break
        assert ended == "cpu_total" and r["cpu_total_s"] > 1.0
        with pytest.raises(SessionDead) as e:
            s.exec("1")
        assert e.value.reason == "cpu_total"
    finally:
        s.close()


def test_memory_over_the_limit_is_refused_or_restarts_saying_so(bwrap_sandbox: LocalSandbox) -> None:
    s = StatefulSession.open(bwrap_sandbox, Language.PYTHON, SessionLimits(memory_mb=128))
    try:
        s.exec("x = 1")
        r = s.exec("b = bytearray(400 * 2**20)")
        assert r["error"]["type"] in ("MemoryError", "MemoryLimitExceeded")
        after = s.exec("x")
        # either the allocation failed inside the interpreter (state kept) or the kernel was
        # killed for it, in which case the next call says the state is gone
        assert after["value"] == "1" or after["state_survived"] is False
    finally:
        s.close()


def test_disk_and_processes_are_limited_over_the_session(bwrap_sandbox: LocalSandbox) -> None:
    s = StatefulSession.open(bwrap_sandbox, Language.BASH, SessionLimits(disk_mb=4, max_processes=8))
    try:
        r = s.exec("head -c 8000000 /dev/zero > big; echo rc=$?")
        assert "rc=0" not in r["stdout"]
        r = s.exec("for i in $(seq 20); do sleep 30 & done; wait; echo done", timeout_s=2)
        assert "fork" in r["stderr"] or "Resource temporarily unavailable" in r["stderr"]
        assert s.exec("echo alive")["stdout"] == "alive\n"
    finally:
        s.close()


HOSTILE = textwrap.dedent(
    """
    import os, signal, socket
    found = []
    for root, dirs, files in os.walk('/', onerror=lambda e: None):
        if root.startswith('/proc') or root.startswith('/sys'):
            dirs[:] = []
            continue
        if 'secret-of-a.txt' in files:
            found.append(root)
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
    killed = []
    for pid in TARGETS:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    try:
        os.listdir('/proc/1/fd')
        supervisor_fds = 'readable'
    except OSError:
        supervisor_fds = 'refused'
    try:
        os.kill(1, signal.SIGKILL)
    except OSError:
        pass
    try:
        socket.create_connection(('127.0.0.1', PORT), timeout=2)
        net = 'reached'
    except OSError:
        net = 'unreachable'
    env = dict(os.environ)
    (found, pids, supervisor_fds, net, 'DISTRS_TOKEN' in env, os.getuid())
    """
)


def test_a_hostile_session_reaches_no_other_session_nor_the_host(
    bwrap_sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRS_TOKEN", "worker-secret")
    a = StatefulSession.open(bwrap_sandbox, Language.PYTHON, SessionLimits())
    b = StatefulSession.open(bwrap_sandbox, Language.PYTHON, SessionLimits())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        a.exec("open('secret-of-a.txt', 'w').write('a'); state = 'a'")
        a_pids = [a.server_pid or 0, *_children(a.server_pid or 0)]
        code = HOSTILE.replace("TARGETS", repr(a_pids)).replace("PORT", str(listener.getsockname()[1]))
        r = b.exec(code, timeout_s=60)
        assert r["error"] is None, r["error"]
        found, pids, supervisor_fds, net, token, uid = eval(r["value"])  # our own test's repr
        assert found == []  # a's files are nowhere in b's view
        assert len(pids) <= 3  # its own supervisor and kernel (and nothing of a's)
        assert supervisor_fds == "refused" and net == "unreachable" and token is False
        assert uid != os.getuid()
        assert b.exec("1 + 1")["value"] == "2"  # its own supervisor shrugged off the SIGKILL
        ra = a.exec("state, open('secret-of-a.txt').read()")
        assert ra["value"] == "('a', 'a')" and ra["state_survived"]  # a was not touched
    finally:
        listener.close()
        a.close()
        b.close()
    assert_no_survivors()


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except OSError:
                continue
    return out


def test_close_ends_every_process_and_later_calls_are_refused(bwrap_sandbox: LocalSandbox) -> None:
    s = StatefulSession.open(bwrap_sandbox, Language.BASH, SessionLimits())
    s.exec("sleep 60 &")
    s.close()
    with pytest.raises(SessionDead):
        s.exec("true")
    assert_no_survivors()


def test_a_killed_supervisor_ends_the_session_as_crashed(bwrap_sandbox: LocalSandbox) -> None:
    s = StatefulSession.open(bwrap_sandbox, Language.PYTHON, SessionLimits())
    try:
        assert s.server_pid is not None
        os.kill(s.server_pid, 9)
        with pytest.raises(SessionDead) as e:
            s.exec("1")
        assert e.value.reason == "crashed" and s.dead == "crashed"
    finally:
        s.close()


def test_a_test_runs_in_a_copy_of_the_state(py: StatefulSession, sh: StatefulSession) -> None:
    py.exec("x = 1")
    r = py.test("x += 10\nassert x == 11\nx")
    assert r["value"] == "11" and r["error"] is None
    assert py.exec("x")["value"] == "1"
    sh.exec("V=1")
    assert sh.test("V=2; echo $V")["stdout"] == "2\n"
    assert sh.exec("echo $V")["stdout"] == "1\n"
