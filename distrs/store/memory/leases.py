"""Leases in memory: taking the heads of a stage queue, heartbeats, completion along the
request's route, release and the requeue of expired leases; plus the wait for work."""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Sequence

from distrs.core.model import Completion, Lease, RequestState, Result, StageRecord, Status
from distrs.store.base import CompleteOutcome
from distrs.store.errors import LeaseExpired, LeaseNotYours, NoNextStage, StoreError, UnknownLease
from distrs.store.memory.state import MemoryState


def next_on_route(route: Sequence[str], stage: str) -> str | None:
    """The stage after ``stage`` on ``route`` (None at its end)."""
    if stage not in route:
        return None
    i = route.index(stage)
    return route[i + 1] if i + 1 < len(route) else None


class MemoryLeases:
    """``LeasePart`` (store/composed.py) over ``MemoryState``."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state
        # lease ids: a random prefix per store and a counter (no urandom call per lease)
        self._lease_prefix = uuid.uuid4().hex[:16]
        self._lease_counter = itertools.count(1)

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str
    ) -> list[Lease]:
        out: list[Lease] = []
        while len(out) < k and (got := self._take(stage, worker_id, now, ttl_s, holder)) is not None:
            out.append(got)
        return out

    def _take(self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str) -> Lease | None:
        s = self.s
        q = s.queues.get(stage)
        while q:
            _, _, task, rid = heapq.heappop(q)
            rec = s.requests.get((task, rid))
            if rec is None or rec.state is not RequestState.QUEUED or rec.stage != stage:
                continue  # stale heap entry
            rec.state = RequestState.RUNNING
            rec.attempts += 1
            lease = Lease(
                lease_id=f"{self._lease_prefix}{next(self._lease_counter):x}",
                request_id=rid,
                task=task,
                batch_id=rec.batch_id,
                reward_type=rec.reward_type,
                stage=stage,
                worker_id=worker_id,
                holder=holder,
                payload=rec.payload,
                artifacts=dict(rec.artifacts),
                deadline=now + ttl_s,
                attempt=rec.attempts,
                started_at=now,
            )
            s.leases[lease.lease_id] = lease
            return lease.model_copy()
        return None

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        await self.s.notify.wait(("work", stage), timeout_s)

    async def get_lease(self, lease_id: str) -> Lease | None:
        lease = self.s.leases.get(lease_id)
        return lease.model_copy() if lease else None

    def _live_lease(self, lease_id: str, holder: str, now: float) -> Lease:
        lease = self.s.leases.get(lease_id)
        if lease is None:
            raise UnknownLease(f"lease {lease_id!r} is unknown or already finished", field="lease_id")
        if lease.holder != holder:
            raise LeaseNotYours(f"lease {lease_id!r} was taken by another credential", field="lease_id")
        if lease.deadline < now:
            raise LeaseExpired(f"lease {lease_id!r} expired at {lease.deadline:.3f}", field="lease_id")
        return lease

    async def heartbeat(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | StoreError]:
        out: list[float | StoreError] = []
        for lease_id in lease_ids:
            try:
                lease = self._live_lease(lease_id, holder, now)
            except StoreError as exc:
                out.append(exc)
                continue
            lease.deadline = now + ttl_s
            out.append(lease.deadline)
        return out

    async def complete(
        self, items: Sequence[Completion], holder: str, now: float
    ) -> tuple[list[CompleteOutcome | StoreError], None]:
        """Each item for itself (no await inside: the bundle is one transition); the usage is
        counted from the records themselves (``MemoryUsage``)."""
        out: list[CompleteOutcome | StoreError] = []
        for it in items:
            try:
                out.append(self._complete_one(it, holder, now))
            except StoreError as exc:
                out.append(exc)
        return out, None

    def _complete_one(self, it: Completion, holder: str, now: float) -> CompleteOutcome:
        s = self.s
        lease = self._live_lease(it.lease_id, holder, now)
        rec = s.requests[(lease.task, lease.request_id)]
        nxt = next_on_route(rec.route, lease.stage) if it.outcome == "next" else None
        if it.outcome == "next" and nxt is None:
            raise NoNextStage(
                f"outcome: 'next' at {lease.stage!r}, the last stage of this request", field="outcome"
            )
        del s.leases[it.lease_id]
        rec.stages.append(
            StageRecord(
                name=lease.stage,
                worker=lease.worker_id,
                queued_s=max(0.0, lease.started_at - rec.stage_enqueued_at),
                run_s=it.run_s,
                outcome=it.outcome,
            )
        )
        if nxt is not None:
            rec.stage = nxt
            rec.stage_enqueued_at = now
            rec.state = RequestState.QUEUED
            rec.attempts = 0
            if it.artifacts is not None:
                rec.artifacts = it.artifacts
            s.enqueue(rec)
            return CompleteOutcome(request=rec.model_copy())
        final = it.result or Result(request_id=rec.request_id, status=Status.INTERNAL_ERROR)
        completed = s.finish(rec, final, now)
        return CompleteOutcome(request=rec.model_copy(), batch_completed=completed)

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        s = self.s
        lease = self._live_lease(lease_id, holder, now)
        del s.leases[lease_id]
        rec = s.requests[(lease.task, lease.request_id)]
        rec.state = RequestState.QUEUED
        rec.attempts -= 1
        s.enqueue(rec)  # same sort key: back at its place
        return lease.stage

    async def requeue_expired(self, now: float, max_attempts: int) -> tuple[list[tuple[str, str]], None]:
        s = self.s
        expired = [lease for lease in s.leases.values() if lease.deadline < now]
        out: list[tuple[str, str]] = []
        for lease in expired:
            del s.leases[lease.lease_id]
            rec = s.requests[(lease.task, lease.request_id)]
            out.append((rec.request_id, lease.stage))
            s.emit("lease_expired", now, rec.task, rec.batch_id, stage=lease.stage, attempt=lease.attempt)
            if rec.attempts >= max_attempts:
                rec.stages.append(
                    StageRecord(name=lease.stage, worker=lease.worker_id, outcome="lease_expired")
                )
                s.finish(
                    rec,
                    Result(
                        request_id=rec.request_id,
                        status=Status.INTERNAL_ERROR,
                        detail={"error": f"lease expired {rec.attempts} times at stage {lease.stage!r}"},
                    ),
                    now,
                )
            else:
                rec.state = RequestState.QUEUED
                s.enqueue(rec)
        return out, None
