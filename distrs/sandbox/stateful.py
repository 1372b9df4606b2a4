"""The host side of a stateful session: one jail that lives across calls (``session_child.py``).

Opening a session takes a private work dir on a tmpfs of its own (``disk_mb``), a pool uid and
its cgroup (``memory_mb``, ``max_processes``), and forks the session's supervisor from the
sandbox's warm zygote for ``session_child.py`` (``zygote.py``: fresh namespaces, no network, no
secrets, the seccomp filter, no bubblewrap and no interpreter start). Where the sandbox keeps no
zygote (a ``plain`` worker, a user-namespaced root pod) the supervisor is started in a jail of its
own instead (``Session.start``): slower to open, the same jail.

Each call is one framed command to the supervisor and one answer, under a deadline of the
exec's ``timeout_s`` plus the supervisor's own grace to interrupt and kill, plus ``HOST_GRACE_S``:
a supervisor that misses it (or whose socket closes) has died with its jail, and the session is
over (``dead``). Files are read and written here, on the session's tmpfs, without the jail
(never through a symlink the session planted: ``workdir.py``).

Thread-safe: calls on one session run one at a time.
"""

from __future__ import annotations

import json
import math
import os
import select
import stat
import sys
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from distrs.core.sessions import Language, SessionLimits, work_path
from distrs.sandbox.base import Limits, Mounts, Sandbox, SandboxError, Session
from distrs.sandbox.forkserver import HelperJail, ServerJail
from distrs.sandbox.local import LocalSandbox, LocalSession

MiB = 1 << 20
CHILD_SOURCE = Path(__file__).with_name("session_child.py")
KERNEL_SOURCE = Path(__file__).with_name("session_kernel.py")
PROTOCOL = b"session/1"
HOST_GRACE_S = 5.0
START_TIMEOUT_S = 30.0
STATE_TIMEOUT_S = 10.0
INTERRUPT_GRACE_S = 1.0
DEFAULT_TIMEOUT_S = 30.0
# The supervisor's own rlimit on CPU, on top of the session's total: it is every process's
# hard bound; the session's total is counted across processes by the supervisor.
CPU_RLIMIT_MARGIN_S = 30.0
MAX_FRAME = 64 << 20
FILES_LIST_MAX = 1000


class SessionDead(SandboxError):
    """The session's jail is gone (``reason``: ``crashed``, ``cpu_total``, ``closed``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def child_source() -> str:
    """The program of a session's jail: the kernel's file, then the supervisor's (which uses it)."""
    return KERNEL_SOURCE.read_text() + "\n" + CHILD_SOURCE.read_text()


def own_python() -> tuple[str, Mounts]:
    """This interpreter and its prefixes outside /usr (bound read-only into the jail)."""
    prefixes = {sys.prefix, sys.base_prefix} | {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    return sys.executable, Mounts(ro_paths=tuple(sorted(p for p in prefixes if not p.startswith("/usr/"))))


def jail_limits(limits: SessionLimits) -> Limits:
    """The rlimits and cgroup limits of a session's jail."""
    return Limits(
        wall_s=3600.0,
        cpu_s=limits.total_cpu_s + CPU_RLIMIT_MARGIN_S,
        memory_bytes=limits.memory_mb * MiB,
        nproc=limits.max_processes,
        fsize_bytes=limits.disk_mb * MiB,
        nofile=256,
        output_bytes=limits.output_bytes,
    )


class StatefulSession:
    """One open session (module docstring). Use :meth:`open`."""

    def __init__(self, language: Language, limits: SessionLimits) -> None:
        self.language = language
        self.limits = limits
        self.forked = False  # forked from a zygote (else started in a jail of its own)
        self.dead: str | None = None  # why the jail is gone
        self._stack = ExitStack()
        self._lock = threading.Lock()
        self._jail: ServerJail | None = None
        self._session: Session | None = None
        self._buf = b""
        self.server_pid: int | None = None

    @classmethod
    def open(
        cls,
        sandbox: Sandbox,
        language: Language,
        limits: SessionLimits,
        files: dict[str, bytes] | None = None,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> StatefulSession:
        """A new session with ``files`` in its work dir; SandboxError if its jail cannot start."""
        s = cls(language, limits)
        try:
            session = s._stack.enter_context(sandbox.session(disk_bytes=limits.disk_mb * MiB))
            s._session = session
            for name, data in (files or {}).items():
                session.write_file(work_path(name), data)
            config = {
                "timeout_s": default_timeout_s,
                "output_bytes": limits.output_bytes,
                "exec_cpu_s": limits.exec_cpu_s,
                "total_cpu_s": limits.total_cpu_s,
                "interrupt_grace_s": INTERRUPT_GRACE_S,
            }
            args = [language.value, json.dumps(config)]
            s._jail = s._start(sandbox, session, args)
            s._stack.callback(s._jail.kill)
            for fd in {s._jail.in_fd, s._jail.out_fd}:
                os.set_blocking(fd, False)
            hello = s._line(time.monotonic() + START_TIMEOUT_S)
            if hello != b"H " + PROTOCOL:
                raise SandboxError(f"session supervisor said {hello[:100]!r} instead of hello")
        except BaseException:
            s._stack.close()
            raise
        return s

    def _start(self, sandbox: Sandbox, session: Session, args: list[str]) -> ServerJail:
        exe, mounts = own_python()
        source = child_source()
        limits = jail_limits(self.limits)
        if isinstance(sandbox, LocalSandbox) and isinstance(session, LocalSession):
            zygote = sandbox.zygote(exe, source, mounts)
            if zygote is not None:
                jail = session.start_forked(zygote, args, limits=limits)
                self.forked, self.server_pid = True, jail.pid
                return jail
        helper = session.start([exe, "-I", "-B", "-c", source, *args], limits=limits, mounts=mounts)
        self.server_pid = helper.proc.pid
        return HelperJail(helper)

    # calls ------------------------------------------------------------------------------------
    def exec(self, code: str, *, stdin: str = "", timeout_s: float | None = None) -> dict[str, Any]:
        """Run ``code`` in the session (module docstring of ``session_child.py``)."""
        return self._run("exec", code, stdin, timeout_s)

    def test(self, code: str, *, stdin: str = "", timeout_s: float | None = None) -> dict[str, Any]:
        """Run ``code`` in a copy of the session's state (a fork of the python kernel, a bash
        subshell): what it changes is not kept."""
        return self._run("test", code, stdin, timeout_s)

    def _run(self, op: str, code: str, stdin: str, timeout_s: float | None) -> dict[str, Any]:
        timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        with self._lock:
            jail = self._live()
            oom_before = jail.oom_kills()
            cmd = {"op": op, "code": code, "stdin": stdin, "timeout_s": timeout}
            answer = self._call(cmd, timeout + INTERRUPT_GRACE_S + HOST_GRACE_S)
            if jail.oom_kills() > oom_before:
                answer["memory_exceeded"] = True
                err = answer.get("error")
                if isinstance(err, dict) and err.get("type") == "KernelDied":
                    err["type"] = "MemoryLimitExceeded"
                    err["message"] = (
                        f"the session went over memory_mb={self.limits.memory_mb}; the interpreter "
                        "was killed and restarted: its state is lost, files are kept"
                    )
            if isinstance(answer.get("value"), str):
                answer["value"] = answer["value"][: self.limits.output_bytes]
            if answer.get("ended"):
                self._end(str(answer["ended"]))
            return answer

    def state(self) -> dict[str, Any]:
        """What the supervisor says of the session's state (restarts, CPU, globals or cwd)."""
        with self._lock:
            self._live()
            return self._call({"op": "state"}, STATE_TIMEOUT_S)

    def write_file(self, path: str, data: bytes) -> None:
        """Write a file into the work dir (ValueError for a path outside it; OSError on a clash)."""
        with self._lock:
            self._live()
            assert self._session is not None
            self._session.write_file(work_path(path), data)

    def read_file(self, path: str, max_bytes: int) -> bytes | None:
        """A regular file of the work dir or ``/tmp`` (absolute), None if missing or too big."""
        with self._lock:
            self._live()
            assert self._session is not None
            if path.startswith("/"):
                return self._session.read_file(path, max_bytes)
            return self._session.read_file(work_path(path), max_bytes)

    def list_files(self, limit: int = FILES_LIST_MAX) -> list[dict[str, Any]]:
        """The work dir's entries (path, size, kind), symlinks listed, never followed."""
        with self._lock:
            self._live()
            assert self._session is not None
            root = self._session.path
            out: list[dict[str, Any]] = []
            for base, dirs, files in os.walk(root, followlinks=False):
                for name in sorted(dirs) + sorted(files):
                    full = os.path.join(base, name)
                    with suppress(OSError):
                        st = os.lstat(full)
                        kind = (
                            "dir"
                            if stat.S_ISDIR(st.st_mode)
                            else "link"
                            if stat.S_ISLNK(st.st_mode)
                            else "file"
                        )
                        out.append({"path": os.path.relpath(full, root), "size": st.st_size, "kind": kind})
                    if len(out) >= limit:
                        return out
            return out

    def close(self) -> None:
        """End the session: its processes, its files, its uid (idempotent)."""
        with self._lock:
            if self.dead is None:
                self.dead = "closed"
            self._stack.close()

    # plumbing ---------------------------------------------------------------------------------
    def _live(self) -> ServerJail:
        if self.dead is not None or self._jail is None:
            raise SessionDead(self.dead or "closed", f"the session is over ({self.dead})")
        return self._jail

    def _end(self, reason: str) -> None:
        self.dead = reason
        self._stack.close()

    def _call(self, cmd: dict[str, Any], wait_s: float) -> dict[str, Any]:
        """One command and its answer; the session ends (SessionDead) when the supervisor dies,
        misbehaves or misses ``wait_s``."""
        jail = self._jail
        assert jail is not None
        deadline = time.monotonic() + wait_s
        data = json.dumps(cmd).encode()
        try:
            self._write(jail.in_fd, b"C %d\n" % len(data) + data, deadline)
            head = self._line(deadline).split(b" ")
            if len(head) != 2 or head[0] != b"A" or not head[1].isdigit() or int(head[1]) > MAX_FRAME:
                raise SandboxError(f"session supervisor: malformed answer {head!r:.200}")
            answer = json.loads(self._exact(int(head[1]), deadline))
            if not isinstance(answer, dict):
                raise SandboxError("session supervisor: an answer that is not an object")
            return answer
        except (SandboxError, OSError, ValueError) as e:
            self._end("crashed")
            raise SessionDead("crashed", f"the session's jail died: {e}") from None

    def _write(self, fd: int, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
                continue
            except BlockingIOError:
                pass
            self._poll(fd, select.POLLOUT, deadline)

    def _poll(self, fd: int, event: int, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxError("the session's supervisor did not answer in time")
        poller = select.poll()
        poller.register(fd, event)
        poller.poll(max(1, math.ceil(left * 1000)))

    def _fill(self, deadline: float) -> None:
        jail = self._jail
        assert jail is not None
        while True:
            try:
                chunk = os.read(jail.out_fd, 1 << 16)
            except BlockingIOError:
                self._poll(jail.out_fd, select.POLLIN, deadline)
                continue
            if not chunk:
                raise SandboxError("the session's supervisor closed its socket")
            self._buf += chunk
            return

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            if len(self._buf) > 64:
                raise SandboxError(f"session supervisor: overlong line {self._buf[:64]!r}")
            self._fill(deadline)
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data, self._buf = self._buf[:n], self._buf[n:]
        return data
