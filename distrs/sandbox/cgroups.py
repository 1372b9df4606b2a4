"""Per-run memory and process limits with cgroups, where the worker may create them.

rlimits bound what one process may map (RLIMIT_AS) and how many processes a uid may have; a
cgroup bounds what the whole run really uses, page cache and the kernel memory of its tmpfs files
included, and tells afterwards whether the kernel killed it for memory (``oom_kill`` count),
which is how a run is reported ``memory_limit_exceeded`` rather than a runtime error.

Where: cgroup v1 (a writable ``memory`` hierarchy, and ``pids`` if writable) is found
automatically from ``/proc/self/cgroup``; cgroup v2 needs a delegated directory with the memory
and pids controllers enabled in its ``cgroup.subtree_control`` (v2 forbids processes in a cgroup
that distributes controllers, so the worker cannot set this up under itself), given as
``DISTRS_SANDBOX_CGROUP_ROOT``. Inside an ordinary container ``/sys/fs/cgroup`` is read-only and
none is used: the rlimits still apply.

A run joins its cgroups through a tiny ``sh`` trampoline before bwrap starts (Python 3.11's
``subprocess`` cannot start a child directly in a cgroup), so nothing of the run ever runs
outside them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

V1_MOUNT = Path("/sys/fs/cgroup")
PIDS_HEADROOM = 8


@dataclass(frozen=True)
class CgroupRoots:
    """Where run cgroups are created: one dir (v2), or the memory (+ pids) dirs (v1)."""

    version: int
    memory: Path
    pids: Path | None = None


def _own_v1_paths(proc_cgroup: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1]:
            for ctrl in parts[1].split(","):
                out[ctrl] = parts[2]
    return out


def _writable_dir(p: Path) -> bool:
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def detect(explicit_root: str | None, mount: Path = V1_MOUNT) -> CgroupRoots | None:
    """The cgroups this process may create run cgroups in, or None."""
    if explicit_root:
        root = Path(explicit_root)
        controllers = (root / "cgroup.subtree_control").read_text().split() if root.is_dir() else []
        if "memory" not in controllers:
            log.warning("sandbox: %s does not delegate the memory controller; no run cgroups", root)
            return None
        return CgroupRoots(2, root, root if "pids" in controllers else None)
    try:
        own = _own_v1_paths(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None
    if "memory" not in own:
        return None
    mem = mount / "memory" / own["memory"].lstrip("/")
    if not _writable_dir(mem) or not (mem / "memory.limit_in_bytes").exists():
        return None
    pids = mount / "pids" / own["pids"].lstrip("/") if "pids" in own else None
    return CgroupRoots(1, mem, pids if pids is not None and _writable_dir(pids) else None)


class RunCgroup:
    """The cgroup(s) runs join through the trampoline.

    One per pool uid (named ``distrs-uid-N``), created once and reused by every run of that uid
    (at most one at a time: a uid is reserved per session), because creating and removing a
    cgroup per run costs milliseconds, mostly waiting for the dying PID namespace to leave it.
    ``set`` applies a run's limits; ``oom_kills`` is read before and after a run.
    """

    def __init__(self, roots: CgroupRoots, name: str) -> None:
        self.version = roots.version
        self.memory = roots.memory / name
        self.pids = roots.pids / name if roots.pids is not None and roots.pids != roots.memory else None
        self._has_pids = roots.pids is not None
        self.memory.mkdir(exist_ok=True)
        if self.pids is not None:
            self.pids.mkdir(exist_ok=True)

    def set(self, memory_bytes: int | None, pids: int | None) -> None:
        """Apply a run's limits. Written before every run: the cgroup of a uid is shared by every
        sandbox on the host that draws from the same uid pool (worker processes of other stages)."""
        if self.version == 2:
            _write(self.memory / "memory.max", "max" if memory_bytes is None else str(memory_bytes))
            with contextlib.suppress(OSError):
                _write(self.memory / "memory.swap.max", "0")
        else:
            value = "-1" if memory_bytes is None else str(memory_bytes)
            # memsw (only with swap accounting) may never be below the memory limit: lift it first
            with contextlib.suppress(OSError):
                _write(self.memory / "memory.memsw.limit_in_bytes", "-1")
            _write(self.memory / "memory.limit_in_bytes", value)
            with contextlib.suppress(OSError):
                _write(self.memory / "memory.memsw.limit_in_bytes", value)
        if self._has_pids:
            target = self.pids if self.pids is not None else self.memory
            # the jail's own processes (bwrap, its init, setpriv/prlimit) count here too; the
            # program's own budget is RLIMIT_NPROC; charges of the uid's previous run that the
            # kernel has not yet released (see ``empty``) must not eat into this run's budget
            limit = pids + PIDS_HEADROOM + self.stale_pids() if pids is not None else None
            _write(target / "pids.max", "max" if limit is None else str(limit))

    def empty(self) -> bool:
        """No task is left in the cgroups: no process of a finished run, live or zombie, is a
        member (a finished run's PID namespace dies asynchronously).

        ``pids.current`` is not waited for: the kernel uncharges a released task only after an
        RCU grace period, which a kernel with lazy RCU (``CONFIG_RCU_LAZY``) stretches to seconds
        with nothing left in the cgroup; ``set`` adds those stale charges to the next run's
        ``pids.max`` instead (``stale_pids``)."""
        for d in (self.memory, self.pids):
            if d is None:
                continue
            try:
                if (d / "cgroup.procs").read_text().strip():
                    return False
            except OSError:
                return False
        return True

    def stale_pids(self) -> int:
        """Charges left in ``pids.current`` by tasks already gone (read while ``empty``)."""
        if not self._has_pids:
            return 0
        target = self.pids if self.pids is not None else self.memory
        try:
            return max(0, int((target / "pids.current").read_text().strip() or "0"))
        except (OSError, ValueError):
            return 0

    def wait_empty(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.empty():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def trampoline(self) -> list[str]:
        """``sh -c`` that moves itself into the cgroups, then execs the rest of argv."""
        dirs = [self.memory] + ([self.pids] if self.pids is not None else [])
        joins = " && ".join(f'echo 0 > "{d}/cgroup.procs"' for d in dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "distrs-cgroup"]

    def join(self, pid: int) -> None:
        """Move process ``pid`` into the cgroups (a zygote's fork, before it runs anything of its
        request; its children are born in them)."""
        for d in [self.memory] + ([self.pids] if self.pids is not None else []):
            _write(d / "cgroup.procs", str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel has killed in this cgroup for its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return 0
        return 0

    def remove(self) -> None:
        """Remove the cgroups (retrying briefly: a PID namespace dies asynchronously)."""
        for d in (self.pids, self.memory):
            if d is None or not d.exists():
                continue
            deadline = time.monotonic() + 2.0
            while True:
                try:
                    d.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        log.warning("sandbox: could not remove %s (processes left?)", d)
                        break
                    time.sleep(0.01)


def reap(roots: CgroupRoots, older_than_s: float = 60.0, now: float | None = None) -> int:
    """Remove run cgroups left by killed workers: empty ones (rmdir refuses a cgroup with live
    processes) older than ``older_than_s``, so one being set up right now is never touched."""
    now = time.time() if now is None else now
    removed = 0
    for root in {roots.memory, *([roots.pids] if roots.pids is not None else [])}:
        for d in root.glob("distrs-run-*"):
            try:
                if now - d.stat().st_mtime > older_than_s:
                    d.rmdir()
                    removed += 1
            except OSError:
                continue
    return removed


def _write(path: Path, value: str) -> None:
    path.write_text(value)
