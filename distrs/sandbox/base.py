"""The ``Sandbox`` protocol: run one untrusted program with limits, in a private work dir.

A caller opens a :class:`Session` (a fresh private work directory, plus the unprivileged uid
the programs of that session run as), writes its files there, and runs commands in it. Every
run is bounded by :class:`Limits`; what happened comes back as a :class:`RunResult`. Backends
(``bwrap`` with namespaces, ``rlimits`` without them) live in their own modules and are picked
by :func:`distrs.sandbox.factory.create_sandbox`.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

MiB = 1 << 20


class MemoryKind(StrEnum):
    """Which rlimit carries ``Limits.memory_bytes``.

    ``as`` (address space) is the strict default; CUDA programs reserve huge virtual ranges, so
    GPU runs use ``data`` (writable private memory) instead.
    """

    AS = "as"
    DATA = "data"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run. ``None`` means unlimited for that resource."""

    wall_s: float = 10.0
    cpu_s: float | None = None  # defaults to the wall limit
    memory_bytes: int | None = 1024 * MiB
    memory_kind: MemoryKind = MemoryKind.AS
    nproc: int | None = 64
    fsize_bytes: int | None = 64 * MiB
    nofile: int | None = 256
    output_bytes: int = 1 * MiB  # per stream (stdout, stderr)
    # Size of the private /tmp where the session has no tmpfs of its own (the worker may not mount;
    # otherwise /tmp lives on the session's tmpfs, limited by SandboxSettings.disk_bytes/inodes).
    tmpfs_bytes: int = 64 * MiB

    def capped(self, wall_s: float) -> Limits:
        """These limits with the wall (and CPU) time at most ``wall_s``."""
        cpu = None if self.cpu_s is None else min(self.cpu_s, wall_s)
        return replace(self, wall_s=min(self.wall_s, wall_s), cpu_s=cpu)

    @property
    def effective_cpu_s(self) -> float:
        return self.cpu_s if self.cpu_s is not None else self.wall_s


class Termination(StrEnum):
    """Why a run ended."""

    EXITED = "exited"  # exited by itself (any exit code)
    SIGNALED = "signaled"  # killed by a signal it did not ask for from us (crash, CPU limit)
    TIMEOUT = "timeout"  # we killed it at the wall limit
    OUTPUT_LIMIT = "output_limit"  # we killed it for writing more than the capture cap


# How runtimes report a failed allocation on stderr (CPython, C++ libstdc++, JVM, Go, Rust, glibc/C,
# Node.js, .NET/Mono).
OUT_OF_MEMORY_MARKERS = (
    b"MemoryError",
    b"std::bad_alloc",
    b"java.lang.OutOfMemoryError",
    b"runtime: out of memory",
    b"fatal error: out of memory",
    b"memory allocation of ",
    b"Cannot allocate memory",
    b"JavaScript heap out of memory",
    b"System.OutOfMemoryException",
)


@dataclass(frozen=True)
class RunResult:
    """What one sandboxed run did."""

    termination: Termination
    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    wall_s: float
    cpu_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: str = "bwrap"
    oom_killed: bool = False  # the kernel killed a process of the run at the cgroup memory limit

    @property
    def ok(self) -> bool:
        return self.termination is Termination.EXITED and self.exit_code == 0

    @property
    def cpu_limited(self) -> bool:
        """Killed by the CPU-time rlimit (SIGXCPU, or SIGKILL at the hard limit)."""
        return self.termination is Termination.SIGNALED and self.signal in (
            signal.SIGXCPU,
            signal.SIGKILL,
        )

    @property
    def timed_out(self) -> bool:
        return self.termination is Termination.TIMEOUT or self.cpu_limited

    @property
    def memory_exceeded(self) -> bool:
        """Stopped by the memory limit: killed at the cgroup limit, or failed an allocation under
        RLIMIT_AS/DATA and said so the way its runtime does (a failed run only: a program that
        prints such a line and exits 0 is judged on its output like any other)."""
        if self.oom_killed:
            return True
        if self.ok or self.timed_out or self.termination is Termination.OUTPUT_LIMIT:
            return False
        tail = self.stderr[-4096:]
        return any(marker in tail for marker in OUT_OF_MEMORY_MARKERS)

    def describe(self) -> str:
        """Short human text: 'exit 1', 'signal SIGSEGV', 'timeout after 2.0s'."""
        if self.termination is Termination.TIMEOUT:
            return f"timeout after {self.wall_s:.2f}s"
        if self.termination is Termination.OUTPUT_LIMIT:
            return "output limit exceeded"
        if self.termination is Termination.SIGNALED and self.signal is not None:
            try:
                return f"signal {signal.Signals(self.signal).name}"
            except ValueError:
                return f"signal {self.signal}"
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Mounts:
    """Extra host paths a run may see (read-only) or use (devices), e.g. an interpreter prefix."""

    ro_paths: tuple[str, ...] = ()
    # (host path, jail path) bound read-only at a path of the jail's own under /jail (e.g. the
    # precompiled headers at /jail/pch), outside the work dir and /tmp, the only writable places;
    # jail-only: the rlimits fallback has no jail to bind them in, so its callers do without
    binds: tuple[tuple[str, str], ...] = ()
    dev_paths: tuple[str, ...] = ()
    sys: bool = False  # /sys read-only (the CUDA runtime reads it)
    # In a jail without /proc: the target of a static /proc/self/exe symlink (a runtime that
    # finds its own files from its path, e.g. rustc's sysroot); ignored where /proc is mounted
    self_exe: str | None = None


def merge_mounts(*parts: Mounts | None) -> Mounts | None:
    """The union of several runs' extra paths (None where there are none)."""
    given = [m for m in parts if m is not None]
    if not given:
        return None
    if len(given) == 1:
        return given[0]

    def union(items: list[tuple[Any, ...]]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(x for t in items for x in t))

    exes = [m.self_exe for m in given if m.self_exe is not None]
    return Mounts(
        ro_paths=union([m.ro_paths for m in given]),
        binds=union([m.binds for m in given]),
        dev_paths=union([m.dev_paths for m in given]),
        sys=any(m.sys for m in given),
        self_exe=exes[0] if exes else None,
    )


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): always ``internal_error`` upstream."""


class Helper(Protocol):
    """A long-lived jailed process started by :meth:`Session.start`, with pipes to it."""

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The outermost jail process: write to its stdin, read its stdout (stderr is discarded)."""
        ...

    def oom_kills(self) -> int:
        """Processes of this jail the kernel has killed at its cgroup memory limit so far (0
        where the jail has no cgroup): read before and after a unit of work."""
        ...

    def kill(self) -> None:
        """Kill the whole jail and reap it (idempotent)."""
        ...


class Session(Protocol):
    """A fresh private work directory and the identity its programs run as."""

    @property
    def path(self) -> Path:
        """Host path of the work dir."""
        ...

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        """Put an input file (source, binary) into the work dir, owned by the run's uid."""
        ...

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        """A regular file the program wrote (never via a symlink); None if missing or too big."""
        ...

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
        """Run ``argv`` with cwd = the work dir; raises SandboxError only for sandbox failures.
        ``fds``: open descriptors of the caller the program inherits under the same numbers."""
        ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived jailed helper with stdin/stdout pipes, in its own process group.

        No wall limit applies: the caller enforces deadlines and kills the group
        (``os.killpg(p.pid, SIGKILL)``), which takes the whole jail down.
        """
        ...

    def start(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> Helper:
        """Like :meth:`spawn`, and the jail joins the run's cgroup (memory and processes of
        ``limits``) as a run's would; the caller ends it with :meth:`Helper.kill`.

        ``fds``: open descriptors of the caller the program inherits under the same numbers
        (e.g. a shared memory file, ``kernelbench/window.py``); nothing else is inherited.

        Under bwrap the helper is the init of the jail's PID namespace (no reaper of bwrap's in
        the jail): the jail's other processes cannot kill or stop it (signals from inside a
        namespace reach its init only where it installed a handler), nor open its pipes through
        ``/proc/1/fd`` where it is non-dumpable; orphans are reparented to it, and when it exits
        the kernel kills every other process of the jail.
        """
        ...


class Sandbox(Protocol):
    """Runs untrusted programs. Thread-safe: each session is independent."""

    @property
    def isolation(self) -> str:
        """``bwrap`` (namespaces) or ``rlimits`` (degraded, only with allow_degraded)."""
        ...

    def session(
        self, *, disk_bytes: int | None = None, inodes: int | None = None
    ) -> AbstractContextManager[Session]:
        """A new private work dir, removed (with everything in it) on exit.

        Where the worker may mount, the work dir and the jail's /tmp share a tmpfs of at most
        ``disk_bytes`` and ``inodes`` files (default: the sandbox settings), e.g. more for a
        compiler than for a test run.
        """
        ...


def default_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment a sandboxed program sees: nothing inherited from the worker."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        # The jail's uid has no passwd entry: getpass.getuser() (torch's profiler imports code
        # that calls it) reads these before it would fail on pwd.getpwuid.
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    if extra:
        env.update(extra)
    return env
