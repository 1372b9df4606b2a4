"""The host side of a fork server: many runs of one program in one jail, one fork per run.

Starting a jail and an interpreter costs tens of milliseconds per run, more than a short test
case itself. A fork server is a small program started once per request in its own jail (a
:meth:`Session.start` helper: the session's namespaces, seccomp filter, uid and cgroup), which
forks a child per run and makes it the program with the run's rlimits (the jailed side is the
reward type's, e.g. ``distrs/rewards/python_forkserver_child.py``, which documents the
protocol). :class:`ForkServerSession` wraps a :class:`Session` so that its runs of that one
program go through the server and every other run goes to the session as before: callers such
as ``judge.run_tests`` are unchanged, and each run still comes back as a :class:`RunResult`.
How the server is started is a :data:`StartServer`: by default a :meth:`Session.start` helper
(:class:`HelperJail`), or a fork of a warm zygote into fresh namespaces (``zygote.py``); either
way the host drives it through a :class:`ServerJail` and trusts it no more.

What the host trusts: nothing the server sends. Every report is parsed strictly (its request's
unpredictable id, known terminations, lengths within the run's output cap); anything else kills
the jail and raises :class:`SandboxError` (the request ends ``internal_error``, never a pass).
A server that dies while a run is under way (killed at the jail's memory limit, say: the program
itself cannot signal it, see ``Session.start``) ends that run as a runtime error (or as a memory
kill where the cgroup says so), and one that does not report
within the run's wall limit plus a grace is killed with its whole jail and the run is a
``timeout``. Either way the next run starts a fresh server in a fresh jail (same work dir).
"""

from __future__ import annotations

import math
import os
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import Protocol

from distrs.sandbox.base import Helper, Limits, Mounts, RunResult, SandboxError, Session, Termination
from distrs.sandbox.session_wrapper import SessionWrapper

MiB = 1 << 20
PROTOCOL = b"forkserver/1"
START_TIMEOUT_S = 30.0
REPORT_GRACE_S = 2.0
CLOSE_GRACE_S = 1.0  # for an idle server to exit by itself at the end of a request  # beyond a run's wall limit, for the server to sweep the jail and report
SERVER_MEMORY_HEADROOM = 64 * MiB  # the server's own share of the jail's memory cgroup
SETUP_MARKER = b"distrs-forkserver: "  # a child whose set-up failed says so on stderr, exit 127
SETUP_FAILED = 127
_MAX_LINE = 512
_TERMINATIONS = {
    b"exited": Termination.EXITED,
    b"signaled": Termination.SIGNALED,
    b"timeout": Termination.TIMEOUT,
    b"output_limit": Termination.OUTPUT_LIMIT,
}
SERVER_DIED = b"the test runner in the jail was killed while this case ran\n"


class ServerGone(Exception):
    """The server's pipe closed: it died (or was killed) before it reported."""


class ReportTimeout(Exception):
    """No report before the host's deadline."""


def server_limits(limits: Limits) -> Limits:
    """The jail's limits for a server whose runs get at most ``limits``: the server's own process
    and memory on top, and no CPU or wall limit of its own (the host's deadlines bound it)."""
    return replace(
        limits,
        wall_s=3600.0,
        cpu_s=3600.0,
        memory_bytes=None if limits.memory_bytes is None else limits.memory_bytes + SERVER_MEMORY_HEADROOM,
        nproc=None if limits.nproc is None else limits.nproc + 1,
    )


def request_line(rid: str, limits: Limits, stdin_len: int) -> bytes:
    """The header of one run request (see the jailed side's protocol)."""

    def n(v: int | None) -> str:
        return "-1" if v is None else str(int(v))

    return (
        f"R {rid} {limits.wall_s:.6f} {limits.effective_cpu_s:.6f} {limits.memory_kind.value} "
        f"{n(limits.memory_bytes)} {n(limits.nproc)} {n(limits.fsize_bytes)} {n(limits.nofile)} "
        f"{limits.output_bytes} {stdin_len}\n"
    ).encode()


def parse_report(
    line: bytes, rid: str, cap: int
) -> tuple[Termination, int, float, float, int, int, bool, bool]:
    """(termination, wait status, wall, cpu, stdout length, stderr length, truncated flags) of a
    report line; SandboxError on anything but a well-formed report for request ``rid``."""
    fields = line.split(b" ")
    if len(fields) >= 2 and fields[0] == b"E" and fields[1] == rid.encode():
        raise SandboxError(f"fork server: {b' '.join(fields[2:])[:300].decode(errors='replace')}")
    if len(fields) != 10 or fields[0] != b"D" or fields[1] != rid.encode():
        raise SandboxError(f"fork server: malformed report {line[:200]!r}")
    try:
        term = _TERMINATIONS[fields[2]]
        status = int(fields[3])
        wall, cpu = float(fields[4]), float(fields[5])
        out_len, err_len = int(fields[6]), int(fields[7])
        flags = (fields[8], fields[9])
    except (KeyError, ValueError):
        raise SandboxError(f"fork server: malformed report {line[:200]!r}") from None
    if not (0 <= status <= 0xFFFF) or not all(math.isfinite(x) and x >= 0 for x in (wall, cpu)):
        raise SandboxError(f"fork server: report out of range {line[:200]!r}")
    if not (0 <= out_len <= cap and 0 <= err_len <= cap) or any(f not in (b"0", b"1") for f in flags):
        raise SandboxError(f"fork server: report out of range {line[:200]!r}")
    return term, status, wall, cpu, out_len, err_len, flags[0] == b"1", flags[1] == b"1"


class ServerJail(Protocol):
    """A started fork server in its jail, as the host drives it: a helper of
    :meth:`Session.start` (:class:`HelperJail`) or a request forked from a zygote
    (``distrs/sandbox/zygote.py``)."""

    @property
    def in_fd(self) -> int:
        """Where requests to the server are written."""
        ...

    @property
    def out_fd(self) -> int:
        """Where the server's replies are read."""
        ...

    def oom_kills(self) -> int: ...

    def lost(self) -> bool:
        """Whether the server died because something outside its jail did (a zygote it was
        forked from died): a sandbox failure, not a case's runtime error."""
        ...

    def end_input(self) -> None:
        """Close the server's input (an idle server then exits by itself)."""
        ...

    def wait(self, timeout_s: float) -> bool:
        """Whether the server exited within ``timeout_s``."""
        ...

    def kill(self) -> None:
        """Kill the whole jail (idempotent)."""
        ...


class HelperJail:
    """A :class:`ServerJail` over a helper of :meth:`Session.start`."""

    def __init__(self, helper: Helper) -> None:
        self._helper = helper
        proc = helper.proc
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin = proc.stdin
        self.in_fd = proc.stdin.fileno()
        self.out_fd = proc.stdout.fileno()

    def oom_kills(self) -> int:
        return self._helper.oom_kills()

    def lost(self) -> bool:
        return False

    def end_input(self) -> None:
        with suppress(OSError):
            self._stdin.close()

    def wait(self, timeout_s: float) -> bool:
        try:
            self._helper.proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        self._helper.kill()


StartServer = Callable[[Limits], ServerJail]


class ForkServer:
    """One jailed fork server: start it, ask it for runs, kill it (with its jail)."""

    def __init__(self, start: StartServer, limits: Limits, *, isolation: str) -> None:
        self._limits = limits
        self._isolation = isolation
        self._buf = b""
        self.dead = False
        self._helper: ServerJail = start(limits)
        self._in = self._helper.in_fd
        self._out = self._helper.out_fd
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        try:
            hello = self._line(time.monotonic() + START_TIMEOUT_S)
        except (ServerGone, ReportTimeout) as e:
            self.close()
            raise SandboxError(f"fork server did not start ({type(e).__name__})") from None
        except SandboxError:
            self.close()
            raise
        if hello != b"H " + PROTOCOL:
            self.close()
            raise SandboxError(f"fork server said {hello[:100]!r} instead of hello")

    def fits(self, limits: Limits) -> bool:
        """Whether a run with ``limits`` can go through this server (its jail's limits hold)."""
        a, b = self._limits, limits
        return (a.memory_bytes, a.memory_kind, a.nproc, a.fsize_bytes, a.nofile) == (
            b.memory_bytes,
            b.memory_kind,
            b.nproc,
            b.fsize_bytes,
            b.nofile,
        )

    def run(self, limits: Limits, stdin: bytes) -> RunResult:
        """One run of the server's program; SandboxError when the server misbehaves."""
        if self.dead:
            raise SandboxError("fork server already closed")
        rid = secrets.token_hex(8)
        start = time.monotonic()
        deadline = start + limits.wall_s + REPORT_GRACE_S
        oom_before = self._helper.oom_kills()
        try:
            self._write(request_line(rid, limits, len(stdin)) + stdin, deadline)
            line = self._line(deadline)
            term, status, wall, cpu, out_len, err_len, out_cut, err_cut = parse_report(
                line, rid, limits.output_bytes
            )
            out = self._exact(out_len, deadline)
            err = self._exact(err_len, deadline)
        except ServerGone:
            return self._died(start, oom_before)
        except ReportTimeout:
            self.close()
            return RunResult(
                Termination.TIMEOUT,
                None,
                None,
                b"",
                b"",
                time.monotonic() - start,
                0.0,
                isolation=self._isolation,
            )
        except SandboxError:
            self.close()
            raise
        exit_code: int | None = None
        sig: int | None = None
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if term is Termination.EXITED:
                term = Termination.SIGNALED
        else:
            exit_code = os.WEXITSTATUS(status)
        if term is Termination.EXITED and exit_code == SETUP_FAILED and err.startswith(SETUP_MARKER):
            self.close()
            raise SandboxError(f"fork server could not set up a run: {err[:300].decode(errors='replace')}")
        return RunResult(
            termination=term,
            exit_code=exit_code,
            signal=sig,
            stdout=out,
            stderr=err,
            wall_s=wall,
            cpu_s=cpu,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            isolation=self._isolation,
            oom_killed=self._helper.oom_kills() > oom_before,
        )

    def _died(self, start: float, oom_before: int) -> RunResult:
        oom = self._helper.oom_kills() > oom_before
        if not oom and self._helper.lost():
            self.close()
            raise SandboxError("the fork server's zygote died while a case ran")
        self.close()
        wall = time.monotonic() - start
        if oom:  # the kernel killed the server at the jail's memory limit: as a run killed there
            return RunResult(
                Termination.SIGNALED,
                None,
                signal.SIGKILL,
                b"",
                b"",
                wall,
                0.0,
                isolation=self._isolation,
                oom_killed=True,
            )
        return RunResult(Termination.EXITED, 1, None, b"", SERVER_DIED, wall, 0.0, isolation=self._isolation)

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        with selectors.DefaultSelector() as sel:
            sel.register(self._in, selectors.EVENT_WRITE)
            while view:
                try:
                    view = view[os.write(self._in, view) :]
                    continue
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    raise ServerGone from None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ReportTimeout
                sel.select(left)

    def _fill(self, deadline: float) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._out, selectors.EVENT_READ)
            while True:
                try:
                    chunk = os.read(self._out, 1 << 16)
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ReportTimeout from None
                    sel.select(left)
                    continue
                if not chunk:
                    raise ServerGone
                self._buf += chunk
                return

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            if len(self._buf) > _MAX_LINE:
                raise SandboxError(f"fork server: oversized line {self._buf[:100]!r}")
            self._fill(deadline)
        line, self._buf = self._buf.split(b"\n", 1)
        if len(line) > _MAX_LINE:
            raise SandboxError(f"fork server: oversized line {line[:100]!r}")
        return line

    def _exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def close(self, grace_s: float = 0.0) -> None:
        """End the server's whole jail (idempotent): with ``grace_s``, first let the server exit
        by itself on the end of its input (its jail then ends and is reaped as any run's), then
        kill whatever is left."""
        if not self.dead and grace_s > 0:
            self._helper.end_input()
            self._helper.wait(grace_s)
        self.dead = True
        self._helper.kill()


class ForkServerSession(SessionWrapper):
    """A :class:`Session` whose runs of ``program`` go through a fork server started with
    ``server`` on first use (and again after a run killed it); other runs go to ``session``.

    ``program`` is the command line the server stands in for (e.g. ``python -I -B main.py``);
    a run of it with other ``env`` or ``mounts`` than given here goes to the session too.
    ``start`` starts a server for runs with given limits in place of ``session.start(server)``
    (a zygote's fork, say): it gets the runs' limits and applies :func:`server_limits` itself.
    """

    def __init__(
        self,
        session: Session,
        *,
        program: Sequence[str],
        server: Sequence[str],
        isolation: str,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        start: StartServer | None = None,
    ) -> None:
        super().__init__(session)
        self._start = start or self._start_helper
        self._program = list(program)
        self._server_argv = list(server)
        self._isolation = isolation
        self._env = env
        self._mounts = mounts
        self._server: ForkServer | None = None
        self.servers_started = 0

    def _start_helper(self, limits: Limits) -> ServerJail:
        helper = self._session.start(
            self._server_argv, limits=server_limits(limits), env=self._env, mounts=self._mounts
        )
        return HelperJail(helper)

    def run(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> RunResult:
        if list(argv) != self._program or env != self._env or mounts != self._mounts or fds:
            return super().run(argv, limits=limits, stdin=stdin, env=env, mounts=mounts, fds=fds)
        server = self._server
        if server is not None and (server.dead or not server.fits(limits)):
            server.close()
            server = self._server = None
        if server is None:
            server = self._server = ForkServer(self._start, limits, isolation=self._isolation)
            self.servers_started += 1
        return server.run(limits, stdin)

    def close(self) -> None:
        """End the server and its jail, if one runs."""
        if self._server is not None:
            self._server.close(grace_s=CLOSE_GRACE_S)
            self._server = None
