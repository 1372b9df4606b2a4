"""The in-process QueueStore: the embedded default for one machine (``distrs up``).

Everything lives in this process's memory; a restart loses it (use Redis for durability). It is
composed as the Redis store is (``store/composed.py``): batches (``batches.py``), leases
(``leases.py``), results (``results.py``) and usage (``usage.py``), over the records of
``state.py``. Methods never await internally before their state change, so each one is atomic on
the event loop.
"""

from __future__ import annotations

from distrs.core.priority import QueuePolicy
from distrs.store.composed import ComposedStore
from distrs.store.memory.batches import MemoryBatches
from distrs.store.memory.leases import MemoryLeases
from distrs.store.memory.results import MemoryResults
from distrs.store.memory.state import MemoryState
from distrs.store.memory.usage import MemoryUsage


class MemoryStore(ComposedStore):
    """The memory store (module docstring)."""

    def __init__(
        self,
        policy: QueuePolicy = QueuePolicy.EBF,
        history_batches: int = 8,
        default_batch_span_s: float = 600.0,
        max_events: int = 100_000,
        result_ttl_s: float = 7 * 24 * 3600,
    ) -> None:
        self.state = MemoryState(policy, history_batches, default_batch_span_s, max_events, result_ttl_s)
        super().__init__(
            MemoryBatches(self.state),
            MemoryLeases(self.state),
            MemoryResults(self.state),
            MemoryUsage(self.state),
        )


__all__ = ["MemoryStore"]
