"""Where a replay's allocated worker-seconds go: busy, starting, or idle for a named reason.

The cluster simulator (``sim/cluster.py``) counts allocated worker-seconds per stage (every
worker that exists: starting, idle or busy). Busy time is the trace's own work and the same
under every policy, so what separates a policy from another is the rest, and this ledger
splits it by worker state:

* ``startup``: a worker between its start and the moment it can take work (``cold_start_s``),
  including workers cancelled before they were ready;
* ``ahead``: idle before its first request, ramp-up ahead of demand (a worker started, or kept
  ready, for work that comes later or never);
* ``between``: idle between two requests;
* ``after``: idle after its last request until it is removed, the scale-down lag;
* ``handoff``: the lease and completion round trips of a stage visit (``handoff_s``).

Workers in a pool are interchangeable, so which idle worker takes a request is a convention:
the most recently freed one (last in, first out), and a scale-down removes the longest idle.
That keeps a pool's surplus together: a pool larger than the work it gets shows up as workers
that idle before their first request or after their last, not as short gaps shared by all.
Draining workers (told to stop while busy) are removed the moment their request ends, so a
drain costs nothing here beyond its busy time.

``allocated = busy + startup + ahead + between + after + handoff`` per stage (up to rounding).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

PARTS = ("startup", "ahead", "between", "after", "handoff")
"""The non-busy parts of allocated worker-seconds, in report order."""

PART_LABELS = {
    "busy": "busy",
    "startup": "startup (worker not ready yet)",
    "ahead": "ramp-up ahead of demand (idle before first request)",
    "between": "idle between requests",
    "after": "scale-down lag (idle after last request)",
    "handoff": "lease hand-off",
}


@dataclass
class StageLedger:
    """Worker-seconds of one stage by state (see the module docstring)."""

    startup: float = 0.0
    ahead: float = 0.0
    between: float = 0.0
    after: float = 0.0
    handoff: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {p: getattr(self, p) for p in PARTS}


@dataclass
class IdleWorkers:
    """The idle workers of one pool: when each fell idle, and whether it has served before.

    A stack: ``take`` returns the most recently freed worker, ``remove`` the longest idle ones.
    Each charges the idle interval it closes to ``ledger``.
    """

    ledger: StageLedger
    _since: deque[tuple[float, bool]] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self._since)

    def add(self, t: float, served: bool) -> None:
        """A worker falls idle at ``t`` (``served``: it has run a request before)."""
        self._since.append((t, served))

    def take(self, t: float) -> None:
        """The most recently freed worker starts a request at ``t``."""
        since, served = self._since.pop()
        if served:
            self.ledger.between += t - since
        else:
            self.ledger.ahead += t - since

    def remove(self, n: int, t: float) -> None:
        """The ``n`` longest idle workers are removed at ``t``."""
        for _ in range(n):
            since, served = self._since.popleft()
            if served:
                self.ledger.after += t - since
            else:
                self.ledger.ahead += t - since
