"""Building the command line that jails one run (pure: no processes started here).

The jail, outermost first::

    [sh -c 'join the run's cgroups'] bwrap ... -- [setpriv --reuid=POOL_UID ...] prlimit ... -- PROGRAM

* Where the worker can switch uids (``pool`` in ``privileges.py``: root, or root of a
  user-namespaced pod), bwrap makes PID, mount, network, IPC, UTS and cgroup namespaces and
  ``setpriv`` drops to the run's own uid from the pool, with no capabilities and
  ``no_new_privs``: a program never shares a uid with the worker or another run.
* Otherwise bwrap also makes a user namespace, in which the program is uid 65534 with no
  capabilities.
* In both, bwrap loads the seccomp filter of ``seccomp.py`` just before it execs the inner
  command: no user namespace of the program's own, no mount, in every mode (the root jail used to
  let a program call ``unshare(CLONE_NEWUSER)`` and mount inside it).
* The only writable places are the session's work dir (``/jail/work``) and ``/tmp``, both on the
  session's own tmpfs with a size and an inode limit (``local.py``).
* Where the container's masked ``/proc`` forbids a fresh procfs, a jail has no ``/proc``; a run
  may ask for a static ``/proc/self/exe`` symlink instead (``Mounts.self_exe``) for runtimes that
  locate their own files through it (rustc, Racket, the JVM launchers' ``$ORIGIN``). The
  container's own ``/proc`` is never bound in: jails sharing the worker's uid could read each
  other's memory through it.
* ``prlimit`` applies the rlimits innermost, inside the namespaces: RLIMIT_NPROC counts per uid
  and user namespace, so a worker's own threads never count against a run's process budget.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distrs.sandbox.base import Limits, MemoryKind, Mounts

JAIL_WORKDIR = "/jail/work"  # not a host path, so no bind of a host dir can shadow it
JAIL_UID = 65534  # the program's uid inside its user namespace ("nobody")

# Host directories a program may read. Everything else does not exist inside the jail.
_BASE_RO = ("/usr", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_TOP_LINKS = ("/bin", "/lib", "/lib32", "/lib64", "/sbin")
# Files the jail gets from the sandbox's own /etc (``etc_dir``): localhost resolves to the
# jail's own loopback, and the program's uid has a name.
ETC_FILES = ("hosts", "passwd", "group", "nsswitch.conf")


def prlimit_args(limits: Limits) -> list[str]:
    """``prlimit`` options for ``limits``: CPU soft limit sends SIGXCPU, the hard one SIGKILL."""
    cpu = max(1, math.ceil(limits.effective_cpu_s))
    args = ["prlimit", f"--cpu={cpu}:{cpu + 1}", "--core=0"]
    if limits.memory_bytes is not None:
        flag = "--as" if limits.memory_kind is MemoryKind.AS else "--data"
        args.append(f"{flag}={limits.memory_bytes}")
    if limits.nproc is not None:
        args.append(f"--nproc={limits.nproc}")
    if limits.fsize_bytes is not None:
        args.append(f"--fsize={limits.fsize_bytes}")
    if limits.nofile is not None:
        args.append(f"--nofile={limits.nofile}")
    return [*args, "--"]


def setpriv_args(uid: int) -> list[str]:
    """Become ``uid`` with no supplementary groups, no capabilities and no way to regain any."""
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def _top_level(path: str) -> list[str]:
    """Reproduce a merged-/usr top-level symlink (``/bin -> usr/bin``) or bind the real dir."""
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


def _parents(path: str, bound: list[str], made: set[str]) -> list[str]:
    """World-traversable mount points for a bind's missing ancestors (e.g. an interpreter bound
    at ``/root/.pyenv/...``: the program's uid must be able to reach it)."""
    args: list[str] = []
    parts = path.strip("/").split("/")[:-1]
    cur = ""
    for part in parts:
        cur += "/" + part
        if cur in made or cur in _TOP_LINKS or any(cur == b or cur.startswith(b + "/") for b in bound):
            continue
        args += ["--perms", "0755", "--dir", cur]
        made.add(cur)
    return args


@dataclass(frozen=True)
class JailSpec:
    """Where a session's pieces are on the host, and how the jail is entered."""

    bwrap: str
    workdir: str  # host dir bound at /jail/work
    tmpdir: str | None  # host dir bound at /tmp (None: a bwrap tmpfs of tmp_bytes)
    tmp_bytes: int
    etc_dir: str | None = None  # host dir holding ETC_FILES
    seccomp_fd: int | None = None
    proc: bool = True
    pool_uid: int | None = None  # setpriv to this uid inside the namespaces
    as_pid_1: bool = False  # the program is the PID namespace's init (no bwrap reaper in the jail)
    # A zygote's jail (``zygote_child.py``): root of it, no seccomp filter, no uid drop or rlimits,
    # and empty mount points where each request's fork puts its own work dir and /tmp
    zygote: bool = False


def bwrap_args(spec: JailSpec, env: Mapping[str, str], mounts: Mounts) -> list[str]:
    """bubblewrap options up to (not including) the ``--`` before the inner command."""
    args = [spec.bwrap, "--die-with-parent", "--new-session"]
    if spec.as_pid_1 or spec.zygote:
        args.append("--as-pid-1")
    if spec.pool_uid is not None or spec.zygote:
        # Root: namespaces without a user namespace, so setpriv can drop to a host uid.
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        args += ["--unshare-all", "--unshare-user", "--uid", str(JAIL_UID), "--gid", str(JAIL_UID)]
        args += ["--cap-drop", "ALL"]
    if spec.seccomp_fd is not None and not spec.zygote:
        args += ["--seccomp", str(spec.seccomp_fd)]
    # The private /tmp comes first, so binds below it (an interpreter in a venv under /tmp, say)
    # are mounted on top of it rather than hidden by it.
    if spec.zygote:
        args += ["--perms", "1777", "--dir", "/tmp"]
    elif spec.tmpdir is not None:
        args += ["--bind", spec.tmpdir, "/tmp"]
    else:
        args += ["--perms", "1777", "--size", str(spec.tmp_bytes), "--tmpfs", "/tmp"]
    bound: list[str] = []
    made: set[str] = {"/tmp"}
    for p in (*_BASE_RO, *mounts.ro_paths):
        args += _parents(p, bound, made)
        args += ["--ro-bind-try", p, p]
        bound.append(p)
    for src, dest in mounts.binds:
        if not dest.startswith("/jail/") or dest == JAIL_WORKDIR or dest.startswith(JAIL_WORKDIR + "/"):
            raise ValueError(f"a bind's jail path must be under /jail/ and not the work dir: {dest!r}")
        args += _parents(dest, bound, made)
        args += ["--ro-bind", src, dest]
        bound.append(dest)
    if spec.etc_dir is not None:
        for name in ETC_FILES:
            args += ["--ro-bind", os.path.join(spec.etc_dir, name), f"/etc/{name}"]
    for p in _TOP_LINKS:
        args += _top_level(p)
    args += ["--dev", "/dev"]
    if spec.proc:  # a fresh procfs for the new PID namespace: it shows only the jail's processes
        args += ["--proc", "/proc"]
    elif mounts.self_exe is not None:
        # No procfs (the container masks its own): a symlink on the jail's read-only root, naming
        # a file the jail already sees and nothing about any process
        args += ["--perms", "0755", "--dir", "/proc", "--perms", "0755", "--dir", "/proc/self"]
        args += ["--symlink", mounts.self_exe, "/proc/self/exe"]
    for p in mounts.dev_paths:
        args += ["--dev-bind-try", p, p]
    if mounts.sys:
        args += ["--ro-bind", "/sys", "/sys"]
    args += _parents(JAIL_WORKDIR, bound, made)
    args += ["--dir", JAIL_WORKDIR] if spec.zygote else ["--bind", spec.workdir, JAIL_WORKDIR]
    # bwrap's own root and /dev are tmpfs without a size limit that a program in a user namespace
    # would own: read-only, so the session's quota'd tmpfs (work dir, /tmp) is all it can fill
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", JAIL_WORKDIR, "--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args


def jail_command(
    argv: Sequence[str],
    spec: JailSpec,
    *,
    limits: Limits,
    env: Mapping[str, str],
    mounts: Mounts,
    trampoline: Sequence[str] = (),
) -> list[str]:
    """The full command (see the module docstring).

    ``--die-with-parent`` also covers the worker dying mid-run: bwrap then kills the jail.
    """
    cmd = [*trampoline, *bwrap_args(spec, env, mounts), "--"]
    if spec.zygote:
        return [*cmd, *argv]
    if spec.pool_uid is not None:
        cmd += setpriv_args(spec.pool_uid)
    return [*cmd, *prlimit_args(limits), *argv]


def fallback_command(
    argv: Sequence[str], *, limits: Limits, uid: int | None, trampoline: Sequence[str] = ()
) -> list[str]:
    """Without namespaces: [sh cgroup] [setpriv ... --] prlimit ... -- argv (cwd = work dir)."""
    cmd = list(trampoline) + (setpriv_args(uid) if uid is not None else [])
    return [*cmd, *prlimit_args(limits), *argv]


def etc_files(uid: int = JAIL_UID) -> dict[str, str]:
    """Contents of the jail's /etc files."""
    return {
        "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:/tmp:/bin/sh\n",
        "group": f"root:x:0:\nsandbox:x:{uid}:\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }
