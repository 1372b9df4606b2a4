"""Building the command line that jails one run (pure: no processes started here).

The jail is bubblewrap (namespaces, read-only binds) around util-linux ``setpriv`` (drop to
the run's uid when we are root) around util-linux ``prlimit`` (rlimits) around the program.
Limits are applied innermost, inside the new namespaces, because RLIMIT_NPROC is counted per
user (and per user namespace): applied outside, a non-root worker's own threads would count
against the sandbox's process budget and bwrap itself could fail to start.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from distrs.sandbox.base import Limits, MemoryKind, Mounts

JAIL_WORKDIR = "/jail/work"  # not a host path, so no bind of a host dir can shadow it

# Host directories a program may read. Everything else does not exist inside the jail.
_BASE_RO = ("/usr", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_TOP_LINKS = ("/bin", "/lib", "/lib32", "/lib64", "/sbin")


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
    """World-traversable mount points for a bind's missing ancestors.

    bwrap (as root) would otherwise create them 0700 and the unprivileged uid could not reach
    e.g. an interpreter bound at ``/root/.pyenv/...``.
    """
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


def bwrap_args(
    *,
    bwrap: str,
    workdir: str,
    limits: Limits,
    env: Mapping[str, str],
    mounts: Mounts,
    as_root: bool,
    proc: bool = True,
) -> list[str]:
    """bubblewrap options up to (not including) the ``--`` before the inner command."""
    args = [bwrap, "--die-with-parent", "--new-session"]
    if as_root:
        # Real root: namespaces without a user namespace, so setpriv can drop to a host uid.
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        args += ["--unshare-all", "--unshare-user", "--disable-userns"]
    # The private /tmp comes first, so binds below it (an interpreter in a venv under /tmp, say)
    # are mounted on top of it rather than hidden by it.
    args += ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp"]
    bound: list[str] = []
    made: set[str] = {"/tmp"}
    for p in (*_BASE_RO, *mounts.ro_paths):
        args += _parents(p, bound, made)
        args += ["--ro-bind-try", p, p]
        bound.append(p)
    for p in _TOP_LINKS:
        args += _top_level(p)
    args += ["--dev", "/dev"]
    if proc:  # a fresh procfs for the new PID namespace: it shows only the jail's processes
        args += ["--proc", "/proc"]
    for p in mounts.dev_paths:
        args += ["--dev-bind-try", p, p]
    if mounts.sys:
        args += ["--ro-bind", "/sys", "/sys"]
    args += _parents(JAIL_WORKDIR, bound, made)
    args += ["--bind", workdir, JAIL_WORKDIR, "--chdir", JAIL_WORKDIR, "--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args


def jail_command(
    argv: Sequence[str],
    *,
    bwrap: str,
    workdir: str,
    limits: Limits,
    env: Mapping[str, str],
    mounts: Mounts,
    uid: int | None,
    proc: bool = True,
) -> list[str]:
    """The full command: bwrap [options] -- [setpriv ... --] prlimit ... -- argv.

    ``--die-with-parent`` also covers the worker dying mid-run: bwrap then kills the jail.
    """
    cmd = bwrap_args(
        bwrap=bwrap,
        workdir=workdir,
        limits=limits,
        env=env,
        mounts=mounts,
        as_root=uid is not None,
        proc=proc,
    )
    cmd.append("--")
    if uid is not None:
        cmd += setpriv_args(uid)
    return [*cmd, *prlimit_args(limits), *argv]


def fallback_command(argv: Sequence[str], *, limits: Limits, uid: int | None) -> list[str]:
    """Without namespaces: [setpriv ... --] prlimit ... -- argv (run with cwd = work dir)."""
    cmd = setpriv_args(uid) if uid is not None else []
    return [*cmd, *prlimit_args(limits), *argv]
