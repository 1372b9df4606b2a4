"""Wait for a child with a wall deadline while capturing its output up to a cap.

Hand-written because ``subprocess.communicate`` buffers everything a program prints (a
multi-gigabyte print loop would exhaust the worker) and cannot stop at a byte cap. This loop
polls the two pipes and a pidfd together, keeps at most ``cap`` bytes per stream, and calls
``kill`` (which must take down every process of the run) at the first of: wall deadline,
output cap. Reading stops as soon as the main process is gone and the pipes are drained or
closed, so a stray daemon holding a pipe open cannot stall the worker.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from distrs.sandbox.base import Termination

_CHUNK = 1 << 16
_DRAIN_GRACE_S = 0.05


@dataclass
class Collected:
    termination: Termination
    status: int  # raw wait status
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    wall_s: float
    cpu_s: float


def collect(proc: subprocess.Popen[bytes], *, wall_s: float, cap: int, kill: Callable[[], None]) -> Collected:
    """Run ``proc`` to completion under ``wall_s``; ``proc`` must have stdout/stderr pipes."""
    assert proc.stdout is not None and proc.stderr is not None
    start = time.monotonic()
    deadline = start + wall_s
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    truncated = dict.fromkeys(bufs, False)
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, "pipe")
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "pid")
    termination: Termination | None = None
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            pipes_open = any(key.data == "pipe" for key in sel.get_map().values())
            if exited_at is not None and (not pipes_open or now - exited_at > _DRAIN_GRACE_S):
                break
            if termination is None and now >= deadline:
                termination = Termination.TIMEOUT
                kill()
                break
            timeout = deadline - now
            if exited_at is not None:
                timeout = min(timeout, exited_at + _DRAIN_GRACE_S - now)
            for key, _ in sel.select(max(timeout, 0.0)):
                if key.data == "pid":
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                    continue
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                buf = bufs[fd]
                room = cap - len(buf)
                if len(chunk) > room:
                    buf += chunk[:room]
                    truncated[fd] = True
                    termination = Termination.OUTPUT_LIMIT
                    break
                buf += chunk
            if termination is not None:
                kill()
                break
    finally:
        sel.close()
        os.close(pidfd)
    # The process is dead or killed: reap it (a killed tree exits promptly).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    proc.stdout.close()
    proc.stderr.close()
    out_fd, err_fd = list(bufs)
    return Collected(
        termination=termination or _natural(status),
        status=status,
        stdout=bytes(bufs[out_fd]),
        stderr=bytes(bufs[err_fd]),
        stdout_truncated=truncated[out_fd],
        stderr_truncated=truncated[err_fd],
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
    )


def _natural(status: int) -> Termination:
    return Termination.SIGNALED if os.WIFSIGNALED(status) else Termination.EXITED
