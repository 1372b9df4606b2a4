"""Build admission: a kernel build starts only when the CPUs it runs on are free.

A torch extension build is minutes of compiler CPU (nvcc's front ends, g++ on torch's headers).
A compile pool that runs more builds at once than its machine has CPUs makes every one of them
slower in proportion, until all of them miss their limit: on a 2-core machine, 14 candidates
built at once each got a seventh of a core and all ended ``timeout``, a score charged to
candidates for the pool's overcommitment. So each build first takes ``need`` CPUs (its compiler
jobs, ``MAX_JOBS``) from the CPUs of the machine, and waits while they are taken; the time it
waits is not the candidate's (its build limit starts when it is admitted).

The count is kept in files, so every compile worker of a machine shares it, threads of one
worker host and separate worker processes alike: ``DIR/cpu-N.lock`` for N below the CPU count,
one ``flock`` per CPU held. A build takes its CPUs all at once, under a lock on ``DIR`` itself,
so two builds never each hold half of what they need. The kernel drops a process's locks when it
dies, however it dies: a killed worker never keeps its CPUs. Threads of one process are admitted
in the order they asked (a queue in front of the files); processes, in whatever order their
polls find CPUs free.

The CPUs counted are the machine's share of this process: its cgroup's CPU quota where one is set
(a Kubernetes pod's CPU limit: each pod counts its own), else the CPUs it may run on.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

POLL_S = 0.1
CGROUP = Path("/sys/fs/cgroup")


def _quota_v2(d: Path) -> float | None:
    """CPUs of a cgroup v2 directory's ``cpu.max`` ("max 100000" or "QUOTA PERIOD")."""
    parts = (d / "cpu.max").read_text().split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return int(parts[0]) / int(parts[1])


def _quota_v1(d: Path) -> float | None:
    """CPUs of a cgroup v1 ``cpu`` directory's CFS quota (-1: none)."""
    q, p = int((d / "cpu.cfs_quota_us").read_text()), int((d / "cpu.cfs_period_us").read_text())
    return None if q <= 0 or p <= 0 else q / p


def cgroup_cpus(proc_cgroup: str, root: Path = CGROUP) -> float | None:
    """The tightest CPU quota of this process's cgroup and its ancestors (v2 or v1), or None."""
    found: list[float] = []
    for line in proc_cgroup.splitlines():
        hier, ctrls, path = [*line.split(":", 2), "", ""][:3]
        read: Callable[[Path], float | None]
        if hier == "0" and ctrls == "":
            base, read = root, _quota_v2
        elif "cpu" in ctrls.split(","):
            named = (root / n for n in (ctrls, "cpu", "cpu,cpuacct"))
            found_base = next((b for b in named if b.is_dir()), None)
            if found_base is None:
                continue
            base, read = found_base, _quota_v1
        else:
            continue
        d = base / path.strip("/")
        while True:
            with contextlib.suppress(OSError, ValueError):
                q = read(d)
                if q is not None:
                    found.append(q)
            if d == base or base not in d.parents:
                break
            d = d.parent
    return min(found) if found else None


def machine_cpus() -> int:
    """CPUs this process's builds may use: the cgroup quota (rounded, at least 1) where set,
    never more than the CPUs it may run on."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota = cgroup_cpus(Path("/proc/self/cgroup").read_text())
    except OSError:
        quota = None
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota + 0.5)))
    return max(1, cpus)


def default_dir() -> str:
    """``TMPDIR/distrs-build-cpus-UID``: shared by this user's compile workers on the machine."""
    return str(Path(tempfile.gettempdir()) / f"distrs-build-cpus-{os.geteuid()}")


@dataclass
class Admission:
    """CPUs held by one build; :meth:`release` gives them back (idempotent)."""

    cpus: int
    waited_s: float
    _fds: list[int] = field(default_factory=list)
    _on_release: Callable[[], None] | None = None

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the last descriptor drops the flock
        if fds and self._on_release is not None:
            self._on_release()


class CpuSlots:
    """``capacity`` CPUs counted in ``directory`` (see the module docstring). One instance per
    directory in a process (:func:`slots`), so its threads queue in order."""

    def __init__(self, directory: str, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = Path(directory)
        self.capacity = max(1, capacity)
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()

    def _try(self, need: int) -> list[int] | None:
        """``need`` CPU locks taken at once, or None (nothing held)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        held: list[int] = []
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)
            for i in range(self.capacity):
                fd = os.open(self.directory / f"cpu-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                held.append(fd)
                if len(held) == need:
                    return held
            for fd in held:
                os.close(fd)
            return None
        except BaseException:
            for fd in held:
                os.close(fd)
            raise
        finally:
            os.close(dfd)

    def in_use(self) -> int:
        """CPUs held now, by every process sharing the directory (for tests and metrics)."""
        busy = 0
        for i in range(self.capacity):
            path = self.directory / f"cpu-{i}.lock"
            if not path.exists():
                continue
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy += 1
            finally:
                os.close(fd)
        return busy

    def acquire(self, need: int, deadline: float) -> Admission | None:
        """``need`` CPUs (at most all of them) once free, or None where ``deadline`` (of
        ``clock``) passes first."""
        need = max(1, min(need, self.capacity))
        start = self._clock()
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
        try:
            while True:
                with self._cond:
                    while self._queue[0] is not ticket:
                        left = deadline - self._clock()
                        if left <= 0:
                            return None
                        self._cond.wait(min(left, POLL_S))
                fds = self._try(need)
                if fds is not None:
                    return Admission(need, self._clock() - start, fds, self._wake)
                left = deadline - self._clock()
                if left <= 0:
                    return None
                time.sleep(min(left, POLL_S))
        finally:
            with self._cond:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


_SLOTS: dict[tuple[str, int], CpuSlots] = {}
_SLOTS_LOCK = threading.Lock()


def slots(directory: str, capacity: int) -> CpuSlots:
    """The process's :class:`CpuSlots` of ``directory`` (so its threads queue in order)."""
    key = (os.path.abspath(directory), capacity)
    with _SLOTS_LOCK:
        s = _SLOTS.get(key)
        if s is None:
            s = _SLOTS[key] = CpuSlots(directory, capacity)
        return s
