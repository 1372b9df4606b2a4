"""A host-wide pool of unprivileged uids, one per concurrent sandboxed run (root only).

Each run gets its own uid so that RLIMIT_NPROC (counted per uid) is a per-run budget, a fork
bomb in one run cannot starve another, and the rlimits fallback can kill every process of a
run with ``kill(-1)`` as that uid. Several worker processes may share a host, so a uid is
reserved with an exclusive ``flock`` on a per-uid lock file, released when the run ends (or
when the holder dies: the kernel drops the lock with the file descriptor).
"""

from __future__ import annotations

import fcntl
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from distrs.sandbox.base import SandboxError


class UidPool:
    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        self._dir = lock_dir
        self._base = base
        self._count = count
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextmanager
    def hold(self, uid: int) -> Iterator[bool]:
        """Try to take ``uid`` without waiting: True while held (no live session has it)."""
        fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    @contextmanager
    def acquire(self) -> Iterator[int]:
        """An exclusive uid for the duration of the block; SandboxError when all are taken."""
        start = random.randrange(self._count)  # spread concurrent processes over the range
        for i in range(self._count):
            uid = self._base + (start + i) % self._count
            fd = os.open(self._dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield uid
            finally:
                os.close(fd)
            return
        raise SandboxError(f"all {self._count} sandbox uids from {self._base} are in use")
