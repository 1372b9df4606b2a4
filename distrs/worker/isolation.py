"""How a worker process starts: its token out of reach, and a namespace of its own to mount in.

A worker runs untrusted programs, so before anything else (``distrs worker`` calls
:func:`enter` first, before any thread exists) it:

1. takes the worker token out of its environment. ``/proc/PID/environ`` shows the environment a
   process was started with, so deleting ``DISTRS_TOKEN`` from ``os.environ`` is not enough: the
   process re-executes itself without it and receives the token through an inherited pipe
   (``DISTRS_TOKEN_FD``), read once and closed;
2. re-executes, when not root, through ``unshare --user --map-root-user --mount``: it is then
   root of a user namespace of its own (still the same unprivileged uid on the node) and may
   mount the per-session tmpfs that give each run a size and inode limit
   (``distrs/sandbox/privileges.py``). Where the pod's seccomp profile refuses namespaces this
   step is skipped and the sandbox probe then explains what to change;
3. marks itself non-dumpable (``PR_SET_DUMPABLE`` 0): its ``/proc`` entries (environ, memory,
   file descriptors) then belong to root, so no other process of the same uid can read them, even
   where an operator opted into the degraded sandbox. This holds in the host's user namespace
   (no ``unshare``); after step 2 the worker's namespace is owned by its uid, so a same-uid
   process *outside* it (none runs in a worker pod) could still read them; the programs it runs
   are kept out by their own uid, namespaces and dropped capabilities (docs/sandbox.md).
   tests/integration/test_worker_isolation.py checks both as an unprivileged uid.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import sys

log = logging.getLogger(__name__)

TOKEN_ENV = "DISTRS_TOKEN"
TOKEN_FD_ENV = "DISTRS_TOKEN_FD"
ENTERED_ENV = "DISTRS_WORKER_ENTERED"
PR_SET_DUMPABLE = 4


def _can_unshare() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        r = subprocess.run(
            [unshare, "--user", "--map-root-user", "--mount", "true"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def reexec_command(argv: list[str], euid: int, can_unshare: bool) -> list[str]:
    """The command the worker re-executes as (pure, for tests)."""
    if euid != 0 and can_unshare:
        return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--", *argv]
    return list(argv)


def enter() -> str | None:
    """Run at the very start of a worker process; returns the token handed over (or None).

    May not return: the first call re-executes the process (same pid) and the second, in the
    new image, returns.
    """
    if os.environ.get(ENTERED_ENV) == "1":
        token = _take_token_fd()
        _set_non_dumpable()
        return token
    env = dict(os.environ)
    env[ENTERED_ENV] = "1"
    token = env.pop(TOKEN_ENV, None)
    pass_fd = None
    if token:
        r, w = os.pipe()
        os.write(w, token.encode())
        os.close(w)
        os.set_inheritable(r, True)
        env[TOKEN_FD_ENV] = str(r)
        pass_fd = r
    cmd = reexec_command(list(sys.orig_argv), os.geteuid(), os.geteuid() != 0 and _can_unshare())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:  # pragma: no cover - defensive: keep running, but never with the token in env
        log.error("worker: could not re-execute itself (%s); continuing in this process", e)
        if pass_fd is not None:
            os.close(pass_fd)
        os.environ.pop(TOKEN_ENV, None)
        _set_non_dumpable()
        return token


def _take_token_fd() -> str | None:
    raw = os.environ.pop(TOKEN_FD_ENV, None)
    if raw is None:
        return None
    fd = int(raw)
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode() or None


def _set_non_dumpable() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:  # pragma: no cover - defensive
        log.warning("worker: prctl(PR_SET_DUMPABLE, 0) failed: errno %d", ctypes.get_errno())
