"""The host's end of the output window between a request's two judging processes.

Outputs are compared where they live, by the reference's process (``tensors.py``), and the
candidate's outputs reach it through this window one chunk at a time, instead of both sides
shipping whole outputs through pipes to the host (6-7 GiB each at KernelBench's current sizes).

The window is an anonymous memory file (``memfd``) of a fixed number of slots, sealed so that
it can neither shrink nor grow (``F_SEAL_SHRINK | F_SEAL_GROW``, then ``F_SEAL_SEAL``): the
candidate, which writes it, cannot truncate it under the reference's mapping (a fault there
would be charged to the service) nor grow it into the host's memory. Each process gets its own
descriptor, inherited through the jail: the candidate's read-write, the reference's read-only
(opened anew through ``/proc/self/fd``, so it is a separate open file without write access).
Its pages are charged to the cgroup of the process that first touches them, the candidate's.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import suppress
from dataclasses import dataclass

SLOTS = 2  # the candidate fills one slot while the reference compares the other


@dataclass
class OutputWindow:
    rw_fd: int
    ro_fd: int
    slot_bytes: int
    slots: int = SLOTS

    @property
    def size(self) -> int:
        return self.slot_bytes * self.slots

    @classmethod
    def create(cls, slot_bytes: int, slots: int = SLOTS) -> OutputWindow:
        fd = os.memfd_create("distrs-kb-window", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, slot_bytes * slots)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            os.fchmod(fd, 0o600)
            ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, ro, slot_bytes, slots)

    def close(self) -> None:
        for fd in (self.rw_fd, self.ro_fd):
            with suppress(OSError):
                os.close(fd)
