"""A session of the host sandbox (``local.py``): one private work dir, runs and jailed helpers in it.

``LocalSession.run`` starts one jailed program per call and collects it (``capture.py``);
``spawn``/``start`` start long-lived helpers (the caller keeps the deadlines), ``start_forked``
forks one from a zygote. The helpers here start the outermost jail process, turn its wait status
into a :class:`~distrs.sandbox.base.RunResult` and kill what a run left behind.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from distrs.sandbox.base import Limits, Mounts, RunResult, SandboxError, Termination
from distrs.sandbox.capture import Collected, collect
from distrs.sandbox.cgroups import RunCgroup
from distrs.sandbox.jail import JAIL_UID, JAIL_WORKDIR
from distrs.sandbox.workdir import read_beneath, write_beneath
from distrs.sandbox.zygote import Zygote, ZygoteJail

if TYPE_CHECKING:
    from distrs.sandbox.local import LocalSandbox

log = logging.getLogger(__name__)

BWRAP = "bwrap"
RLIMITS = "rlimits"


class LocalSession:
    """One private work dir; ``run`` may be called many times (e.g. once per test case)."""

    def __init__(self, sandbox: LocalSandbox, path: Path, tmpdir: Path | None, uid: int | None) -> None:
        self._sandbox = sandbox
        self._path = path
        self._tmpdir = tmpdir
        self._uid = uid

    @property
    def path(self) -> Path:
        return self._path

    @property
    def tmpdir(self) -> Path | None:
        """Host path of the jail's /tmp when it lives on the session's tmpfs."""
        return self._tmpdir

    @property
    def uid(self) -> int | None:
        return self._uid

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        """Write an input file into the work dir, owned by the run's uid. ``name`` may be a
        relative path (``dir1/dir2/f``, as SandboxFusion's ``files`` allow): its directories are
        created, and nothing is ever written through a symlink."""
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in name.split("/")):
            raise ValueError(f"file name must be a relative path inside the work dir, got {name!r}")
        return write_beneath(self._path, name, data, mode=0o755 if executable else 0o644, owner=self._uid)

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        """Read an output file the program wrote: regular files only, never through a symlink
        (a program could point its "binary" at a host secret), None when missing/oversized.

        ``name`` is relative to the work dir, or an absolute path as the program saw it: under
        the work dir (``/jail/work/...``) or the session's ``/tmp`` where that is on the
        session's tmpfs. Any other absolute path is None: the jail's root is read-only, so the
        program cannot have written there, and a host path is never read."""
        root, rel = self._path, name
        if name.startswith("/"):
            for prefix, base in ((JAIL_WORKDIR + "/", self._path), ("/tmp/", self._tmpdir)):
                if name.startswith(prefix) and base is not None:
                    root, rel = base, name[len(prefix) :]
                    break
            else:
                return None
        if not rel or any(p in ("", ".", "..") for p in rel.split("/")):
            return None
        return read_beneath(root, rel, max_bytes)

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
        sandbox = self._sandbox
        cgroup = sandbox.run_cgroup(self._uid, limits)
        try:
            trampoline = cgroup.trampoline() if cgroup is not None else []
            oom_before = cgroup.oom_kills() if cgroup is not None else 0
            with sandbox.command(self, argv, limits, env, mounts, trampoline) as (
                cmd,
                cwd,
                popen_env,
                jail_fds,
            ):
                stdin_fd = _memfd(stdin)
                try:
                    proc = _start(
                        cmd,
                        cwd,
                        popen_env,
                        stdin=stdin_fd,
                        stderr=subprocess.PIPE,
                        pass_fds=(*jail_fds, *fds),
                    )
                finally:
                    os.close(stdin_fd)

            def kill() -> None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                sandbox.kill_leftovers(self._uid)

            got = collect(proc, wall_s=limits.wall_s, cap=limits.output_bytes, kill=kill)
            if sandbox.isolation == RLIMITS:
                kill()  # daemons that left the process group but kept our uid
            oom = cgroup is not None and cgroup.oom_kills() > oom_before
        finally:
            if cgroup is not None and self._uid is None:
                cgroup.remove()  # a one-off cgroup (runs without a pool uid)
        return _result(got, sandbox.isolation, oom)

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
        with self._sandbox.command(self, argv, limits, env, mounts, []) as (cmd, cwd, popen_env, fds):
            return _start(cmd, cwd, popen_env, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=fds)

    def start(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> LocalHelper:
        """A long-lived jailed helper (as ``spawn``) in the run's cgroup, where there is one, and
        the init of its jail's PID namespace (see ``Session.start``); ``fds`` are inherited."""
        sandbox = self._sandbox
        cgroup = sandbox.run_cgroup(self._uid, limits)
        try:
            trampoline = cgroup.trampoline() if cgroup is not None else []
            jail = sandbox.command(self, argv, limits, env, mounts, trampoline, as_pid_1=True)
            with jail as (cmd, cwd, popen_env, jail_fds):
                proc = _start(
                    cmd,
                    cwd,
                    popen_env,
                    stdin=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(*jail_fds, *fds),
                )
        except BaseException:
            if cgroup is not None and self._uid is None:
                cgroup.remove()
            raise
        return LocalHelper(proc, sandbox, self._uid, cgroup)

    def start_forked(self, zygote: Zygote, args: Sequence[str], *, limits: Limits) -> ZygoteJail:
        """A long-lived jailed helper forked from ``zygote`` (``LocalSandbox.zygote``) as the init
        of fresh namespaces, with this session's work dir, /tmp and uid (a private zygote's
        requests: the jail uid in a user namespace of their own), and ``limits`` (its rlimits,
        and its cgroup's where there is one), started with ``args`` as its arguments."""
        uid = JAIL_UID if zygote.private else self._uid
        if uid is None or self._tmpdir is None:
            raise SandboxError("a zygote serves only sessions with a pool uid and a tmpfs of their own")
        cgroup = self._sandbox.run_cgroup(self._uid, limits)
        try:
            return zygote.spawn(
                workdir=self._path,
                tmpdir=self._tmpdir,
                uid=uid,
                limits=limits,
                args=args,
                cgroup=cgroup,
                own_cgroup=self._uid is None,
            )
        except BaseException:
            if cgroup is not None and self._uid is None:
                cgroup.remove()
            raise


class LocalHelper:
    """A jailed helper of a :class:`LocalSession` (``Session.start``) and its cgroup."""

    def __init__(
        self, proc: subprocess.Popen[bytes], sandbox: LocalSandbox, uid: int | None, cgroup: RunCgroup | None
    ) -> None:
        self._proc = proc
        self._sandbox = sandbox
        self._uid = uid
        self._cgroup = cgroup
        self._killed = False

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self._proc

    def oom_kills(self) -> int:
        return self._cgroup.oom_kills() if self._cgroup is not None else 0

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        # bwrap exits once the jail's init has (the kernel then kills the rest of the jail)
        exited = self._proc.poll() is not None
        if not exited:
            with suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        for f in (self._proc.stdin, self._proc.stdout):
            if f is not None:
                with suppress(OSError):
                    f.close()
        if not exited and self._uid is not None:
            # The helper is its jail's init. Where it dropped to a pool uid (setpriv), it lost
            # bwrap's parent-death signal, and it has a session of its own: killing bwrap's
            # process group does not reach it. The uid is this session's alone.
            kill_uid(self._uid)
        self._sandbox.kill_leftovers(self._uid)
        if self._cgroup is not None and self._uid is None:
            self._cgroup.remove()  # a one-off cgroup (runs without a pool uid)


def _start(
    cmd: list[str],
    cwd: str,
    env: dict[str, str],
    *,
    stdin: int,
    stderr: int,
    pass_fds: tuple[int, ...] = (),
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
            pass_fds=pass_fds,
        )
    except OSError as e:
        raise SandboxError(f"cannot start sandbox ({cmd[0]}): {e}") from e


def _result(got: Collected, isolation: str, oom_killed: bool = False) -> RunResult:
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
    if termination is Termination.EXITED and exit_code in (1, 2, 126, 127) and _setup_failed(got.stderr):
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
        oom_killed=oom_killed,
    )


_SETUP_MARKERS = (b"bwrap: ", b"setpriv: ", b"prlimit: ", b"distrs-cgroup: ")


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


def kill_uid(uid: int) -> None:
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
