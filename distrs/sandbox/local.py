"""The sandbox backends that run programs on this host: ``bwrap`` and the ``rlimits`` fallback.

``bwrap``: each session gets a private tmpfs (size and inode limits) holding its work dir and the
jail's ``/tmp``; each run is jailed as ``jail.py`` describes (its own uid where the worker can
switch uids, a user namespace, PID/mount/network/IPC/UTS namespaces, the seccomp filter of
``seccomp.py``, rlimits) and, where the worker may create cgroups, limited in memory and
processes by a cgroup of its own. Killing the outer bwrap kills the namespace's init, and the
kernel then kills every process in the namespace, so nothing survives a run.

``rlimits`` (only with ``allow_degraded``, where namespaces are refused): same rlimits and
cgroups, scrubbed environment and private work dir, but **no network isolation and no filesystem
isolation**; survivors are killed by process group and, as root, by killing every process of the
run's dedicated uid.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from distrs.sandbox import privileges
from distrs.sandbox.base import (
    Limits,
    MemoryKind,
    Mounts,
    RunResult,
    SandboxError,
    Termination,
    default_env,
)
from distrs.sandbox.capture import Collected, collect
from distrs.sandbox.cgroups import CgroupRoots, RunCgroup, detect
from distrs.sandbox.cgroups import reap as reap_cgroups
from distrs.sandbox.jail import JAIL_UID, JAIL_WORKDIR, JailSpec, etc_files, fallback_command, jail_command
from distrs.sandbox.seccomp import SeccompUnavailable, jail_filter
from distrs.sandbox.settings import SandboxSettings
from distrs.sandbox.uids import UidPool
from distrs.sandbox.workdir import make_workdir, read_beneath, remove_workdir, write_beneath
from distrs.sandbox.zygote import (
    PRIVATE_MACHINES,
    Zygote,
    ZygoteJail,
    child_source,
    detached_clone,
    initial_user_namespace,
    private_proc_covered,
)

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
    ) -> RunResult:
        sandbox = self._sandbox
        cgroup = sandbox.run_cgroup(self._uid, limits)
        try:
            trampoline = cgroup.trampoline() if cgroup is not None else []
            oom_before = cgroup.oom_kills() if cgroup is not None else 0
            with sandbox.command(self, argv, limits, env, mounts, trampoline) as (cmd, cwd, popen_env, fds):
                stdin_fd = _memfd(stdin)
                try:
                    proc = _start(cmd, cwd, popen_env, stdin=stdin_fd, stderr=subprocess.PIPE, pass_fds=fds)
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
            _kill_uid(self._uid)
        self._sandbox.kill_leftovers(self._uid)
        if self._cgroup is not None and self._uid is None:
            self._cgroup.remove()  # a one-off cgroup (runs without a pool uid)


class LocalSandbox:
    """Runs programs on this host; ``isolation`` is ``bwrap`` or ``rlimits``."""

    def __init__(self, settings: SandboxSettings, isolation: str = BWRAP) -> None:
        if isolation not in (BWRAP, RLIMITS):
            raise ValueError(f"unknown sandbox isolation {isolation!r}")
        self._settings = settings
        self._isolation = isolation
        self._base = Path(settings.workdir_base)
        self._mode = privileges.current(settings.uid_base, settings.uid_count)
        self._uids = (
            UidPool(self._base / ".uids", settings.uid_base, settings.uid_count)
            if self._mode == privileges.POOL
            else None
        )
        self._can_mount = self._mode in (privileges.POOL, privileges.PRIVATE)
        self._cgroups: CgroupRoots | None = detect(settings.cgroup_root) if settings.cgroups else None
        if self._cgroups is not None:
            reap_cgroups(self._cgroups)
        self._etc: Path | None = None
        self._seccomp: Path | None = None
        if isolation == BWRAP:
            self._etc, self._seccomp = self._prepare_jail_files()
        self._lock = threading.Lock()
        self._uid_cgroups: dict[int, RunCgroup] = {}
        self._zygotes: dict[tuple[object, ...], Zygote] = {}
        self._clone_mounts: bool | None = None
        self.reap_stale()

    def reap_stale(self) -> int:
        """Unmount and remove the sessions of pool uids no live process holds (a worker killed
        mid-run on a host leaves its session mounted); returns how many were removed."""
        if self._uids is None or not self._base.is_dir():
            return 0
        reaped = 0
        for d in self._base.glob("run-*-*"):
            tag = d.name.split("-")[1]
            if not tag.isdigit():
                continue
            with self._uids.hold(int(tag)) as free:
                if free:
                    with suppress(OSError):
                        privileges.unmount(d)
                    remove_workdir(d)
                    reaped += 1
        return reaped

    @property
    def isolation(self) -> str:
        return self._isolation

    @property
    def mode(self) -> str:
        """``pool``, ``private`` or ``plain`` (``privileges.py``)."""
        return self._mode

    @property
    def cgroups(self) -> CgroupRoots | None:
        return self._cgroups

    def _prepare_jail_files(self) -> tuple[Path, Path]:
        """The jail's /etc files and the compiled seccomp filter, written once per sandbox."""
        d = self._base / ".jail"
        etc = d / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        os.chmod(self._base, 0o711)
        os.chmod(d, 0o711)
        os.chmod(etc, 0o755)
        for name, text in etc_files().items():
            _write_atomic(etc / name, text.encode(), 0o644)
        try:
            bpf = jail_filter()
        except SeccompUnavailable as e:
            raise SandboxError(f"cannot build the jail's seccomp filter: {e}") from e
        path = d / "seccomp.bpf"
        _write_atomic(path, bpf, 0o600)
        return etc, path

    @contextmanager
    def session(self, *, disk_bytes: int | None = None, inodes: int | None = None) -> Iterator[LocalSession]:
        size = disk_bytes or self._settings.disk_bytes
        files = inodes or self._settings.inodes
        with self._uid() as uid:
            path = make_workdir(self._base, uid)
            mounted = False
            try:
                if self._can_mount:
                    owner = uid if uid is not None else os.geteuid()
                    try:
                        privileges.mount_tmpfs(path, size_bytes=size, inodes=files, uid=owner, gid=owner)
                    except OSError as e:
                        raise SandboxError(f"cannot mount the session's tmpfs: {e}") from e
                    mounted = True
                    work, tmp = path / "work", path / "tmp"
                    work.mkdir(mode=0o700)
                    tmp.mkdir(mode=0o700)
                    os.chmod(tmp, 0o1777)
                    for p in (work, tmp):
                        os.chown(p, owner, owner)
                    yield LocalSession(self, work, tmp, uid)
                else:
                    yield LocalSession(self, path, None, uid)
            finally:
                self.kill_leftovers(uid)
                if mounted:
                    try:
                        privileges.unmount(path)
                    except OSError as e:  # pragma: no cover - defensive
                        log.error("sandbox: %s", e)
                remove_workdir(path)

    @contextmanager
    def _uid(self) -> Iterator[int | None]:
        if self._uids is None:
            yield None
        else:
            with self._uids.acquire() as uid:
                yield uid

    def run_cgroup(self, uid: int | None, limits: Limits) -> RunCgroup | None:
        """The cgroup a run joins, with its limits set, where this process may create one: the
        pool uid's own (kept across runs), else a one-off the caller removes."""
        if self._cgroups is None:
            return None
        # CUDA programs map far more than they use (memory_kind data): no memory cgroup for them.
        memory = limits.memory_bytes if limits.memory_kind is MemoryKind.AS else None
        try:
            if uid is None:
                cg = RunCgroup(self._cgroups, f"distrs-run-{uuid.uuid4().hex[:12]}")
            else:
                with self._lock:
                    if uid not in self._uid_cgroups:
                        self._uid_cgroups[uid] = RunCgroup(self._cgroups, f"distrs-uid-{uid}")
                    cg = self._uid_cgroups[uid]
                # the uid's last run may still be dying (a fork bomb takes a moment to reap):
                # its processes must not count against this run
                if not cg.wait_empty(5.0):
                    raise SandboxError(f"processes of the previous run of uid {uid} did not end")
            cg.set(memory, limits.nproc)
            return cg
        except OSError as e:
            raise SandboxError(f"cannot set up the run's cgroup: {e}") from e

    @contextmanager
    def command(
        self,
        session: LocalSession,
        argv: Sequence[str],
        limits: Limits,
        env: Mapping[str, str] | None,
        mounts: Mounts | None,
        trampoline: Sequence[str],
        *,
        as_pid_1: bool = False,
    ) -> Iterator[tuple[list[str], str, dict[str, str], tuple[int, ...]]]:
        """(command, cwd, environment of the outermost process, fds to pass) for one program;
        the fds are closed when the block ends (after the process started). ``as_pid_1``: the
        program is the init of the jail's PID namespace."""
        if not argv:
            raise ValueError("argv must not be empty")
        full_env = default_env(env)
        if self._isolation != BWRAP:
            cmd = fallback_command(argv, limits=limits, uid=session.uid, trampoline=trampoline)
            yield cmd, str(session.path), full_env, ()
            return
        assert self._seccomp is not None and self._etc is not None
        fd = os.open(self._seccomp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            spec = JailSpec(
                bwrap=self._settings.bwrap,
                workdir=str(session.path),
                tmpdir=str(session.tmpdir) if session.tmpdir is not None else None,
                tmp_bytes=limits.tmpfs_bytes,
                etc_dir=str(self._etc),
                seccomp_fd=fd,
                proc=self._settings.mount_proc,
                pool_uid=session.uid,
                as_pid_1=as_pid_1,
            )
            cmd = jail_command(
                argv, spec, limits=limits, env=full_env, mounts=mounts or Mounts(), trampoline=trampoline
            )
            yield cmd, "/", {"PATH": "/usr/bin:/bin"}, (fd,)
        finally:
            os.close(fd)

    def zygote(self, interpreter: str, program: str, mounts: Mounts) -> Zygote | None:
        """The zygote (``zygote.py``) of ``program``, a python source run by ``interpreter``
        (``-I -B``) with ``mounts``; started on first use and kept for this sandbox's life. None
        where this sandbox cannot fork requests from one: without session tmpfs (``plain``), as
        root of a user-namespaced pod (``pool`` outside ``initial_user_namespace``), in
        ``private`` mode where the worker's own /proc has parts it could write to (a root that
        mapped only itself, see ``private_proc_covered``) or on a machine outside
        ``PRIVATE_MACHINES``, where ``open_tree`` is refused, or with /tmp itself bound (a request's
        /tmp would hide it; binds below /tmp are put back over each request's /tmp,
        ``zygote_child.py``)."""
        if self._isolation != BWRAP or not self._can_mount or "/tmp" in mounts.ro_paths:
            return None
        if self._mode == privileges.POOL and not initial_user_namespace():
            return None  # a user-namespaced pod: no fresh /proc for a request
        if self._mode == privileges.PRIVATE and (
            os.uname().machine not in PRIVATE_MACHINES
            or (self._settings.mount_proc and private_proc_covered())
        ):
            return None
        if self._mode not in (privileges.POOL, privileges.PRIVATE) or not self._can_clone_mounts():
            return None
        key = (interpreter, program, mounts)
        with self._lock:
            z = self._zygotes.get(key)
            if z is None:
                argv = [interpreter, "-I", "-B", "-c", child_source()]
                z = Zygote(
                    lambda ctl: self._start_zygote(argv, mounts, ctl),
                    program,
                    proc=self._settings.mount_proc,
                    private=self._mode == privileges.PRIVATE,
                )
                self._zygotes[key] = z
            return z

    def _can_clone_mounts(self) -> bool:
        """Whether this process may hand mounts over (``open_tree``), asked once: a pod whose
        seccomp profile predates the zygote refuses it (EPERM) and keeps a jail per request."""
        if self._clone_mounts is None:
            try:
                os.close(detached_clone(self._base))
                self._clone_mounts = True
            except OSError as e:
                log.warning("sandbox: no python zygote, each request starts a jail (open_tree: %s)", e)
                self._clone_mounts = False
        return self._clone_mounts

    def close_zygotes(self) -> None:
        """Stop every zygote of this sandbox (and the request jails nested in them)."""
        with self._lock:
            zygotes, self._zygotes = list(self._zygotes.values()), {}
        for z in zygotes:
            z.close()

    def _start_zygote(self, argv: list[str], mounts: Mounts, ctl: int) -> subprocess.Popen[bytes]:
        assert self._seccomp is not None and self._etc is not None
        fd = os.open(self._seccomp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            spec = JailSpec(
                bwrap=self._settings.bwrap,
                workdir="",
                tmpdir=None,
                tmp_bytes=0,
                etc_dir=str(self._etc),
                proc=self._settings.mount_proc,
                zygote=True,
            )
            # read-only binds under /tmp, which each request's server puts back over its own /tmp
            under_tmp = [p for p in mounts.ro_paths if p.startswith("/tmp/")]
            cmd = jail_command(
                [*argv, str(fd), self._mode, *under_tmp],
                spec,
                limits=Limits(),
                env=default_env(None),
                mounts=mounts,
            )
            return subprocess.Popen(
                cmd,
                stdin=ctl,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                start_new_session=True,
                close_fds=True,
                pass_fds=(fd,),
            )
        except OSError as e:
            raise SandboxError(f"cannot start the zygote ({self._settings.bwrap}): {e}") from e
        finally:
            os.close(fd)

    def kill_leftovers(self, uid: int | None) -> None:
        """Without namespaces, kill whatever still runs as a session's dedicated uid."""
        if uid is not None and self._isolation == RLIMITS:
            _kill_uid(uid)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


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
