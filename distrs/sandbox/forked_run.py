"""One short program forked from a zygote: its input written, its output read, under a deadline.

``Session.run`` starts bubblewrap and a fresh interpreter for every run, tens of milliseconds of
CPU before the program's first line. A run that is one exchange (a request on stdin, a reply on
stdout, as a reward plugin's call is: ``distrs/rewards/plugin.py``) can instead be forked from the
sandbox's warm zygote for its program (``zygote.py``): the same fresh namespaces, uid, rlimits,
cgroup and seccomp filter as a python request's fork server (docs/sandbox.md, "Python zygote"),
without the start. The program gets the request's socket as stdin and stdout and ``/dev/null`` as
stderr; it ends when it has answered (its PID namespace, and so every process it left, is killed
after it).

What comes back is the :class:`RunResult` ``Session.run`` would give, except that the exit status
is not known (the zygote reaps the program): ``exit_code`` is None, stderr is empty, and callers
judge by the output. A program that outlives ``limits.wall_s`` is killed and ends ``timeout``; one
that writes more than ``limits.output_bytes`` ends ``output_limit``.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Sequence

from distrs.sandbox.base import Limits, RunResult, SandboxError, Termination
from distrs.sandbox.forkserver import ServerJail
from distrs.sandbox.local import LocalSession
from distrs.sandbox.zygote import Zygote

CHUNK = 1 << 16
EXIT_GRACE_S = 1.0  # for the program to exit once it closed its output


def exchange(
    jail: ServerJail,
    data: bytes,
    *,
    wall_s: float,
    cap: int,
    now: Callable[[], float] = time.monotonic,
) -> tuple[bytes, Termination]:
    """Write ``data`` to the jail's input (then close it) while reading its output until it is
    closed: (the output, EXITED), or what was read by the deadline (TIMEOUT) or past ``cap``
    (OUTPUT_LIMIT). The jail's fds are made non-blocking."""
    deadline = now() + wall_s
    in_fd, out_fd = jail.in_fd, jail.out_fd
    for fd in {in_fd, out_fd}:
        os.set_blocking(fd, False)
    pending = memoryview(data)
    if not pending:
        jail.end_input()
    out = bytearray()
    poller = select.poll()
    while True:
        left = deadline - now()
        if left <= 0:
            return bytes(out), Termination.TIMEOUT
        events: dict[int, int] = {out_fd: select.POLLIN}
        if pending:
            events[in_fd] = events.get(in_fd, 0) | select.POLLOUT
        for fd, mask in events.items():
            poller.register(fd, mask)
        ready = dict(poller.poll(max(1, int(left * 1000))))
        for fd in events:
            poller.unregister(fd)
        if pending and ready.get(in_fd, 0) & (select.POLLOUT | select.POLLERR | select.POLLHUP):
            try:
                pending = pending[os.write(in_fd, pending[:CHUNK]) :]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # it stopped reading: what it was given is all it gets
                pending = memoryview(b"")
            if not pending:
                jail.end_input()
        if ready.get(out_fd, 0) & (select.POLLIN | select.POLLHUP | select.POLLERR):
            try:
                chunk = os.read(out_fd, CHUNK)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                return bytes(out), Termination.EXITED
            out += chunk
            if len(out) > cap:
                return bytes(out[:cap]), Termination.OUTPUT_LIMIT


def run_forked(
    session: LocalSession, zygote: Zygote, args: Sequence[str], *, stdin: bytes, limits: Limits
) -> RunResult:
    """Fork ``zygote``'s program as one run of ``session`` with ``args`` and ``limits``, feed it
    ``stdin`` and collect its output (see the module docstring). SandboxError where the jail could
    not be built, or the zygote died under the run (a sandbox failure, not the program's)."""
    t0 = time.monotonic()
    jail = session.start_forked(zygote, args, limits=limits)
    try:
        out, how = exchange(jail, stdin, wall_s=limits.wall_s, cap=limits.output_bytes)
        if how is Termination.EXITED:
            jail.wait(EXIT_GRACE_S)
            if not out and jail.lost():
                raise SandboxError("the zygote died while the program ran")
        oom = jail.oom_kills() > 0
    finally:
        jail.kill()
    return RunResult(
        termination=how,
        exit_code=None,
        signal=None,
        stdout=out,
        stderr=b"",
        wall_s=time.monotonic() - t0,
        cpu_s=0.0,
        stdout_truncated=how is Termination.OUTPUT_LIMIT,
        oom_killed=oom,
    )
