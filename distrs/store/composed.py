"""A QueueStore composed of four parts: batches, leases, results and usage.

Both stores are built this way (``memory/`` and ``redis/``), part for part, so one conformance
suite covers both and a reader finds an operation in the part named for what it keeps:

* ``BatchPart``: batch registration and records, submission, request records;
* ``LeasePart``: leases (one or a bundle), heartbeats, completion, release, the expiry sweep, the
  wait for work;
* ``ResultPart``: results and the wait for them, history, events, the planner's snapshot;
* ``UsagePart``: what each tenant holds (the quotas' figures).

Counting usage is a step of its own after each transition that changes it: a transition hands
back the ``UsageDeltas`` it left uncounted and the store counts them (``_counted``). Where the
transition counted them itself in the same atomic step (the memory store; Redis standalone and
Sentinel, whose scripts move the counters) it hands back None and the step does nothing.

Each part answers the bundle form of an operation (lists of leases); the single forms of the
QueueStore (``lease``, ``heartbeat``, ``complete``) are the bundle form with one item, defined
once, here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Sequence
from typing import Protocol, TypeVar

from distrs.core.history import BatchProfile
from distrs.core.model import BatchInfo, Completion, Lease, RequestRecord, Result
from distrs.store.base import CompleteOutcome, Event, NewRequest, Snapshot, SubmitOutcome, TenantUsage
from distrs.store.errors import StoreError
from distrs.store.usage_deltas import UsageDeltas

T = TypeVar("T")


class BatchPart(Protocol):
    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]: ...

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None: ...

    async def submit(
        self, requests: list[NewRequest], now: float
    ) -> tuple[SubmitOutcome, UsageDeltas | None]: ...

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None: ...

    async def store_route(self, task: str, request_id: str, route: Sequence[str]) -> bool: ...


class LeasePart(Protocol):
    def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str
    ) -> Awaitable[list[Lease]]: ...

    async def wait_for_work(self, stage: str, timeout_s: float) -> None: ...

    async def get_lease(self, lease_id: str) -> Lease | None: ...

    async def heartbeat(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | StoreError]: ...

    def complete(
        self, items: Sequence[Completion], holder: str, now: float
    ) -> Awaitable[tuple[list[CompleteOutcome | StoreError], UsageDeltas | None]]: ...

    async def release(self, lease_id: str, holder: str, now: float) -> str: ...

    async def requeue_expired(
        self, now: float, max_attempts: int
    ) -> tuple[list[tuple[str, str]], UsageDeltas | None]: ...


class ResultPart(Protocol):
    async def batch_results(self, task: str, batch_id: str) -> list[Result]: ...

    async def wait_batch(self, task: str, batch_id: str, timeout_s: float, until_complete: bool) -> None: ...

    async def history(self, task: str) -> list[BatchProfile]: ...

    async def events(self, after: str, timeout_s: float, count: int) -> list[Event]: ...

    async def snapshot(self, now: float, finished_types: Collection[str]) -> Snapshot: ...


class UsagePart(Protocol):
    async def count(self, deltas: UsageDeltas) -> None:
        """Count what a transition left uncounted (never raises: the transition has landed)."""
        ...

    async def tenant_usage(self, tenant: str, now: float, exact: bool) -> TenantUsage: ...


def _one(got: T | StoreError) -> T:
    if isinstance(got, StoreError):
        raise got
    return got


class ComposedStore:
    """The QueueStore of four parts (module docstring). ``start``/``close``/``ping`` are for the
    store that holds connections to override."""

    def __init__(self, batches: BatchPart, leases: LeasePart, results: ResultPart, usage: UsagePart) -> None:
        self.batches = batches
        self.leases = leases
        self.results = results
        self.usage = usage

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> bool:
        return True

    # transitions: each one, then its usage step -----------------------------------------------

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        if not requests:
            return SubmitOutcome()
        out, uncounted = await self.batches.submit(requests, now)
        await self._counted(uncounted)
        return out

    async def complete(self, item: Completion, holder: str, now: float) -> CompleteOutcome:
        (got,), uncounted = await self.leases.complete((item,), holder, now)
        await self._counted(uncounted)
        return _one(got)

    async def complete_many(
        self, items: Sequence[Completion], holder: str, now: float
    ) -> list[CompleteOutcome | StoreError]:
        if not items:
            return []
        outs, uncounted = await self.leases.complete(items, holder, now)
        await self._counted(uncounted)
        return outs

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        out, uncounted = await self.leases.requeue_expired(now, max_attempts)
        await self._counted(uncounted)
        return out

    async def _counted(self, uncounted: UsageDeltas | None) -> None:
        if uncounted:
            await self.usage.count(uncounted)

    # batches and requests ------------------------------------------------------------------

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        return await self.batches.register_batch(batch, now)

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        return await self.batches.get_batch(task, batch_id)

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        return await self.batches.get_request(task, request_id)

    async def store_route(self, task: str, request_id: str, route: Sequence[str]) -> bool:
        return await self.batches.store_route(task, request_id, route)

    # leases --------------------------------------------------------------------------------

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        got = await self.leases.lease(
            stage, worker_id, now, ttl_s, 1, worker_id if holder is None else holder
        )
        return got[0] if got else None

    async def lease_many(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str | None = None
    ) -> list[Lease]:
        if k <= 0:
            return []
        return await self.leases.lease(
            stage, worker_id, now, ttl_s, k, worker_id if holder is None else holder
        )

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        await self.leases.wait_for_work(stage, timeout_s)

    async def get_lease(self, lease_id: str) -> Lease | None:
        return await self.leases.get_lease(lease_id)

    async def heartbeat(self, lease_id: str, holder: str, now: float, ttl_s: float) -> float:
        (got,) = await self.leases.heartbeat([lease_id], holder, now, ttl_s)
        return _one(got)

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | StoreError]:
        return await self.leases.heartbeat(lease_ids, holder, now, ttl_s) if lease_ids else []

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        return await self.leases.release(lease_id, holder, now)

    # results -------------------------------------------------------------------------------

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        return await self.results.batch_results(task, batch_id)

    async def wait_batch(
        self, task: str, batch_id: str, timeout_s: float, until_complete: bool = False
    ) -> None:
        await self.results.wait_batch(task, batch_id, timeout_s, until_complete)

    async def history(self, task: str) -> list[BatchProfile]:
        return await self.results.history(task)

    async def events(self, after: str, timeout_s: float, count: int = 100) -> list[Event]:
        return await self.results.events(after, timeout_s, count)

    async def snapshot(self, now: float, finished_types: Collection[str] = ()) -> Snapshot:
        return await self.results.snapshot(now, finished_types)

    # usage ---------------------------------------------------------------------------------

    async def tenant_usage(self, tenant: str, now: float, exact: bool = False) -> TenantUsage:
        return await self.usage.tenant_usage(tenant, now, exact)
