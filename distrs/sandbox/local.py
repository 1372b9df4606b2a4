"""The sandbox backends that run programs on this host: ``bwrap`` and the ``rlimits`` fallback
(their sessions: ``local_session.py``).

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
    SandboxError,
    default_env,
)
from distrs.sandbox.cgroups import CgroupRoots, RunCgroup, detect
from distrs.sandbox.cgroups import reap as reap_cgroups
from distrs.sandbox.jail import JailSpec, etc_files, fallback_command, jail_command
from distrs.sandbox.local_session import BWRAP, RLIMITS, LocalSession, kill_uid
from distrs.sandbox.seccomp import SeccompUnavailable, jail_filter
from distrs.sandbox.settings import SandboxSettings
from distrs.sandbox.uids import UidPool
from distrs.sandbox.workdir import make_workdir, remove_workdir
from distrs.sandbox.zygote import (
    PRIVATE_MACHINES,
    Zygote,
    child_source,
    detached_clone,
    initial_user_namespace,
    private_proc_covered,
)

log = logging.getLogger(__name__)


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
            kill_uid(uid)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
