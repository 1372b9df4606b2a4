"""The sandbox backends that run programs on this host: ``bwrap`` and the ``rlimits`` fallback.

``bwrap`` (preferred): new PID, network, IPC, UTS (and, non-root, user) namespaces; the program
sees only read-only system directories, a private ``/tmp`` and its work dir; killing the outer
bwrap kills the namespace's init, and the kernel then kills every process in the namespace, so
nothing survives a run (double-forked daemons included).

``rlimits`` (fallback where the kernel forbids namespaces): same rlimits, scrubbed environment
and private work dir, but **no network isolation and no filesystem isolation**; survivors are
killed by process group and, as root, by killing every process of the run's dedicated uid.
The factory logs a loud warning when it has to use it.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from distrs.sandbox.base import (
    Limits,
    Mounts,
    RunResult,
    SandboxError,
    Termination,
    default_env,
)
from distrs.sandbox.capture import Collected, collect
from distrs.sandbox.jail import fallback_command, jail_command
from distrs.sandbox.settings import SandboxSettings
from distrs.sandbox.uids import UidPool
from distrs.sandbox.workdir import make_workdir, remove_workdir

log = logging.getLogger(__name__)

BWRAP = "bwrap"
RLIMITS = "rlimits"


class LocalSession:
    """One private work dir; ``run`` may be called many times (e.g. once per test case)."""

    def __init__(self, sandbox: LocalSandbox, path: Path, uid: int | None) -> None:
        self._sandbox = sandbox
        self._path = path
        self._uid = uid

    @property
    def path(self) -> Path:
        return self._path

    @property
    def uid(self) -> int | None:
        return self._uid

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        """Write an input file into the work dir, owned by the run's uid."""
        p = self._path / name
        if p.parent != self._path:
            raise ValueError(f"file name must be a plain name, got {name!r}")
        p.write_bytes(data)
        os.chmod(p, 0o755 if executable else 0o644)
        if self._uid is not None:
            os.chown(p, self._uid, self._uid)
        return p

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        """Read an output file the program wrote: regular files only, never through a symlink
        (a program could point its "binary" at a host secret), None when missing/oversized."""
        try:
            fd = os.open(self._path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(max_bytes + 1)
            return data if len(data) <= max_bytes else None
        finally:
            os.close(fd)

    def run(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
    ) -> RunResult:
        sandbox = self._sandbox
        cmd, cwd, popen_env = sandbox.command(self, argv, limits, env, mounts)
        stdin_fd = _memfd(stdin)
        try:
            proc = _start(cmd, cwd, popen_env, stdin=stdin_fd, stderr=subprocess.PIPE)
        finally:
            os.close(stdin_fd)

        def kill() -> None:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            sandbox.kill_leftovers(self._uid)

        got = collect(proc, wall_s=limits.wall_s, cap=limits.output_bytes, kill=kill)
        if sandbox.isolation == RLIMITS:
            kill()  # daemons that left the process group but kept our uid
        return _result(got, sandbox.isolation)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
    ) -> subprocess.Popen[bytes]:
        """A long-lived jailed helper with stdin/stdout pipes (stderr discarded); no wall limit:
        the caller enforces its own deadlines and kills the process group."""
        cmd, cwd, popen_env = self._sandbox.command(self, argv, limits, env, mounts)
        return _start(cmd, cwd, popen_env, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)


class LocalSandbox:
    """Runs programs on this host; ``isolation`` is ``bwrap`` or ``rlimits``."""

    def __init__(self, settings: SandboxSettings, isolation: str = BWRAP) -> None:
        if isolation not in (BWRAP, RLIMITS):
            raise ValueError(f"unknown sandbox isolation {isolation!r}")
        self._settings = settings
        self._isolation = isolation
        self._base = Path(settings.workdir_base)
        self._as_root = os.geteuid() == 0
        self._uids = (
            UidPool(self._base / ".uids", settings.uid_base, settings.uid_count) if self._as_root else None
        )
        self._lock = threading.Lock()

    @property
    def isolation(self) -> str:
        return self._isolation

    @contextmanager
    def session(self) -> Iterator[LocalSession]:
        with self._uid() as uid:
            path = make_workdir(self._base, uid)
            try:
                yield LocalSession(self, path, uid)
            finally:
                self.kill_leftovers(uid)
                remove_workdir(path)

    @contextmanager
    def _uid(self) -> Iterator[int | None]:
        if self._uids is None:
            yield None
        else:
            with self._uids.acquire() as uid:
                yield uid

    def command(
        self,
        session: LocalSession,
        argv: Sequence[str],
        limits: Limits,
        env: Mapping[str, str] | None,
        mounts: Mounts | None,
    ) -> tuple[list[str], str, dict[str, str]]:
        """(command, cwd, environment of the outermost process) for one jailed program."""
        if not argv:
            raise ValueError("argv must not be empty")
        full_env = default_env(env)
        if self._isolation == BWRAP:
            cmd = jail_command(
                argv,
                bwrap=self._settings.bwrap,
                workdir=str(session.path),
                limits=limits,
                env=full_env,
                mounts=mounts or Mounts(),
                uid=session.uid,
                proc=self._settings.mount_proc,
            )
            return cmd, "/", {"PATH": "/usr/bin:/bin"}
        return fallback_command(argv, limits=limits, uid=session.uid), str(session.path), full_env

    def kill_leftovers(self, uid: int | None) -> None:
        """Without namespaces, kill whatever still runs as a session's dedicated uid."""
        if uid is not None and self._isolation == RLIMITS:
            _kill_uid(uid)


def _start(
    cmd: list[str], cwd: str, env: dict[str, str], *, stdin: int, stderr: int
) -> subprocess.Popen[bytes]:
    """Start the outermost jail process in its own process group (stdout piped to us)."""
    try:
        return subprocess.Popen(
            cmd,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise SandboxError(f"cannot start sandbox ({cmd[0]}): {e}") from e


def _result(got: Collected, isolation: str) -> RunResult:
    """The run's outcome from the outermost process's wait status and captured output."""
    exit_code: int | None = None
    sig: int | None = None
    termination = got.termination
    if os.WIFSIGNALED(got.status):
        sig = os.WTERMSIG(got.status)
    else:
        exit_code = os.WEXITSTATUS(got.status)
        if termination is Termination.EXITED and isolation == BWRAP and 128 < exit_code < 128 + 65:
            # bwrap reports a child killed by signal N as exit 128+N.
            termination, sig, exit_code = Termination.SIGNALED, exit_code - 128, None
    if termination is Termination.EXITED and exit_code in (1, 126, 127) and _setup_failed(got.stderr):
        raise SandboxError(f"sandbox setup failed: {got.stderr[:500].decode(errors='replace')}")
    return RunResult(
        termination=termination,
        exit_code=exit_code,
        signal=sig,
        stdout=got.stdout,
        stderr=got.stderr,
        wall_s=got.wall_s,
        cpu_s=got.cpu_s,
        stdout_truncated=got.stdout_truncated,
        stderr_truncated=got.stderr_truncated,
        isolation=isolation,
    )


_SETUP_MARKERS = (b"bwrap: ", b"setpriv: ", b"prlimit: ")


def _setup_failed(stderr: bytes) -> bool:
    """The jail's own tools failed (not the program): their messages lead stderr.

    A program could print such a line itself; it then only turns its own run into an
    ``internal_error``, which earns it nothing.
    """
    return stderr.startswith(_SETUP_MARKERS)


def _memfd(data: bytes) -> int:
    """A read-only descriptor holding ``data`` (no pipe to feed, no file on disk)."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    try:
        _write_all(fd, data)
        ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(fd)
    return ro


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _kill_uid(uid: int) -> None:
    """Kill every process running as ``uid`` (kill(-1) from a process with that uid)."""
    try:
        subprocess.run(
            ["kill", "-KILL", "--", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:  # pragma: no cover - defensive
        log.error("could not kill leftover processes of uid %d: %s", uid, e)
