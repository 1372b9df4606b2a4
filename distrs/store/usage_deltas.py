"""What a transition changed in the tenants' usage and left for the store's usage step to count,
and the merging of those changes over one event-loop tick.

A store transition (a submission, completions, the expiry sweep) hands back ``UsageDeltas``: per
(tenant, batch key) the requests it accepted, and the final results it recorded with their
bytes and, for a batch that completed, when its results expire. The store then counts them as a
step of its own (``store/composed.py``). Where the transition counted them itself in the same
atomic step (the memory store; Redis standalone and Sentinel, whose scripts move the counters)
the deltas are empty. In Redis Cluster the counters live in another slot than the task's, so the
scripts hand the deltas back and the store writes them (``store/redis/usage.py``).

Under load many completions land in the same tick (one per worker call), mostly of the same few
batches, so ``DeltaCoalescer`` sums their deltas per batch and per tenant and sends them as one
pipeline after the tick, as ``redis/coalesce.py`` does for script calls. Each caller still
returns only once its update has been sent (a quota check right after a completion sees it), and
the update is sent even if that caller is cancelled meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class BatchDelta:
    """Final results of one batch: how many, their bytes, and once the batch completed, when
    its results expire."""

    n: int = 0
    size: int = 0
    expiry: float | None = None


@dataclass
class UsageDeltas:
    """Counter deltas of some accepted submissions and final results."""

    batches: dict[tuple[str, str], BatchDelta] = field(default_factory=dict)  # (tenant, batch key)
    tenants: dict[str, list[int]] = field(default_factory=dict)  # tenant -> [results, bytes]
    # accepted submissions: (tenant, batch key) -> requests, and per tenant
    submitted: dict[tuple[str, str], int] = field(default_factory=dict)
    tenants_submitted: dict[str, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.batches or self.submitted)

    def submit(self, tenant: str, bkey: str, n: int) -> None:
        """``n`` requests of the batch accepted."""
        self.submitted[(tenant, bkey)] = self.submitted.get((tenant, bkey), 0) + n
        self.tenants_submitted[tenant] = self.tenants_submitted.get(tenant, 0) + n

    def add(self, tenant: str, bkey: str, n: int, size: int, expiry: float | None) -> None:
        """``n`` final results of ``size`` bytes in all; ``expiry`` set when the batch completed."""
        b = self.batches.setdefault((tenant, bkey), BatchDelta())
        b.n += n
        b.size += size
        if expiry is not None:
            b.expiry = expiry
        t = self.tenants.setdefault(tenant, [0, 0])
        t[0] += n
        t[1] += size

    def merge(self, other: UsageDeltas) -> None:
        for (tenant, bkey), n in other.submitted.items():
            self.submit(tenant, bkey, n)
        for (tenant, bkey), b in other.batches.items():
            self.add(tenant, bkey, b.n, b.size, b.expiry)


class DeltaCoalescer:
    """Sends the deltas added in one tick with one call of ``send`` (which must not raise)."""

    def __init__(self, send: Callable[[UsageDeltas], Awaitable[None]]) -> None:
        self._send = send
        self._pending: UsageDeltas | None = None
        self._sent: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def add(self, deltas: UsageDeltas) -> None:
        if self._pending is None or self._sent is None:
            loop = asyncio.get_running_loop()
            self._pending, self._sent = UsageDeltas(), loop.create_future()
            loop.call_soon(self._flush)
        self._pending.merge(deltas)
        await asyncio.shield(self._sent)

    def _flush(self) -> None:
        pending, sent = self._pending, self._sent
        self._pending = self._sent = None
        assert pending is not None and sent is not None
        task = asyncio.create_task(self._run(pending, sent))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, deltas: UsageDeltas, sent: asyncio.Future[None]) -> None:
        try:
            await self._send(deltas)
        finally:
            if not sent.done():
                sent.set_result(None)
