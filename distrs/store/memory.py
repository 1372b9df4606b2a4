"""The in-process QueueStore: the embedded default for one machine (``distrs up``).

Everything lives in this process's memory; a restart loses it (use Redis for durability). Queues
are binary heaps keyed by ``core.priority.sort_key``; long-polls park on a ``Notifier``. Methods
never await internally before their state change, so each one is atomic on the event loop.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections import deque
from collections.abc import Collection, Sequence

from distrs.core.accounting import finish_batch, request_profile
from distrs.core.history import (
    SPAN_SAMPLES,
    BatchProfile,
    SpanSample,
    estimate_completion,
    finished_sample,
    prior_span,
)
from distrs.core.model import BatchInfo, Lease, RequestRecord, RequestState, Result, StageRecord, Status
from distrs.core.priority import QueuePolicy, sort_key
from distrs.store.base import (
    BatchLive,
    CompleteOutcome,
    CompletionItem,
    Event,
    NewRequest,
    Snapshot,
    SubmitOutcome,
    TenantUsage,
)
from distrs.store.errors import (
    BatchConflict,
    BatchFull,
    LeaseExpired,
    LeaseNotYours,
    StoreError,
    UnknownBatch,
    UnknownLease,
)
from distrs.store.notify import Notifier

_HeapItem = tuple[float, int, str, str]  # (primary, seq, task, request_id)


class MemoryStore:
    def __init__(
        self,
        policy: QueuePolicy = QueuePolicy.EBF,
        history_batches: int = 8,
        default_batch_span_s: float = 600.0,
        max_events: int = 100_000,
        result_ttl_s: float = 7 * 24 * 3600,
    ) -> None:
        self.result_ttl_s = result_ttl_s
        self.policy = policy
        self.history_batches = history_batches
        self.default_batch_span_s = default_batch_span_s
        self._batches: dict[tuple[str, str], BatchInfo] = {}
        self._batch_requests: dict[tuple[str, str], list[str]] = {}
        self._result_bytes: dict[tuple[str, str], int] = {}  # per batch: JSON bytes of its results
        self._finished: list[tuple[float, tuple[str, str]]] = []  # (completed_at, batch key) heap
        self._task_owner: dict[str, str] = {}
        self._requests: dict[tuple[str, str], RequestRecord] = {}
        self._queues: dict[str, list[_HeapItem]] = {}
        self._leases: dict[str, Lease] = {}
        self._history: dict[str, deque[BatchProfile]] = {}
        self._spans: deque[SpanSample] = deque(maxlen=SPAN_SAMPLES)  # all tasks, newest last
        self._events: deque[Event] = deque(maxlen=max_events)
        self._event_seq = 0
        self._seq = 0
        self._notify = Notifier()
        # lease ids: a random prefix per store and a counter (no urandom call per lease)
        self._lease_prefix = uuid.uuid4().hex[:16]
        self._lease_counter = itertools.count(1)

    # lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> bool:
        return True

    # helpers ---------------------------------------------------------------------------------
    def _emit(self, type_: str, ts: float, task: str = "", batch_id: str = "", **data: object) -> None:
        self._event_seq += 1
        self._events.append(
            Event(id=str(self._event_seq), type=type_, ts=ts, task=task, batch_id=batch_id, data=dict(data))
        )
        self._notify.notify("events")

    def _enqueue(self, rec: RequestRecord) -> None:
        batch = self._batches[(rec.task, rec.batch_id)]
        primary, seq = sort_key(self.policy, batch.estimated_completion or 0.0, rec.seq)
        heapq.heappush(self._queues.setdefault(rec.stage, []), (primary, seq, rec.task, rec.request_id))
        self._notify.notify_one(("work", rec.stage))

    def _owned(self, tenant: str, task: str) -> bool:
        owner = self._task_owner.get(task)
        return owner is None or owner == tenant

    # batches ---------------------------------------------------------------------------------
    def _prune(self, now: float) -> None:
        """Forget finished batches (and their requests) older than ``result_ttl_s``.

        Finished batches wait in a heap by completion time, so a call looks only at those due
        (every registration prunes: scanning every batch kept for a week cost each registration
        time in proportion to all the batches ever finished)."""
        cutoff = now - self.result_ttl_s
        old: list[tuple[str, str]] = []
        heap = self._finished
        while heap and heap[0][0] < cutoff:
            done_at, key = heapq.heappop(heap)
            b = self._batches.get(key)
            if b is not None and b.completed_at == done_at:  # not a batch registered again since
                old.append(key)
        for key in old:
            for rid in self._batch_requests.pop(key, []):
                self._requests.pop((key[0], rid), None)
            del self._batches[key]
            self._result_bytes.pop(key, None)

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        self._prune(now)
        if not self._owned(batch.tenant, batch.task):
            raise UnknownBatch(f"task {batch.task!r} not found", field="task")
        key = (batch.task, batch.batch_id)
        existing = self._batches.get(key)
        if existing is not None:
            if existing.size != batch.size or (
                batch.reward_type is not None and existing.reward_type not in (None, batch.reward_type)
            ):
                raise BatchConflict(
                    f"batch {batch.batch_id!r} of task {batch.task!r} exists with size {existing.size} "
                    f"and reward_type {existing.reward_type!r}",
                    field="size",
                )
            return existing.model_copy(), False
        new = batch.model_copy()
        new.registered_at = now
        hist = list(self._history.get(batch.task, ()))
        prior = self.default_batch_span_s
        if not hist:
            prior = prior_span(self._spans, batch.reward_type, now, self.default_batch_span_s)
        new.estimated_completion = estimate_completion(hist, new.anchor, prior)
        self._task_owner.setdefault(batch.task, batch.tenant)
        self._batches[key] = new
        self._batch_requests[key] = []
        self._emit("batch_registered", now, new.task, new.batch_id, size=new.size)
        return new.model_copy(), True

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        b = self._batches.get((task, batch_id))
        return b.model_copy() if b else None

    # submit ----------------------------------------------------------------------------------
    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        out = SubmitOutcome()
        fresh: list[NewRequest] = []
        added: dict[tuple[str, str], int] = {}
        seen: set[tuple[str, str]] = set()
        for r in requests:  # validate the whole call first: all or nothing
            key = (r.task, r.batch_id)
            batch = self._batches.get(key)
            if batch is None or not self._owned(r.tenant, r.task):
                raise UnknownBatch(
                    f"batch {r.batch_id!r} of task {r.task!r} is not registered (POST /v1/batches first)",
                    field="batch_id",
                )
            if (r.task, r.request_id) in self._requests or (r.task, r.request_id) in seen:
                out.duplicates.append(r.request_id)
                continue
            seen.add((r.task, r.request_id))
            added[key] = added.get(key, 0) + 1
            if batch.submitted + added[key] > batch.size:
                raise BatchFull(
                    f"batch {r.batch_id!r} of task {r.task!r} already has {batch.size} requests "
                    f"(its declared size)",
                    field="batch_id",
                )
            fresh.append(r)
        for r in fresh:
            key = (r.task, r.batch_id)
            batch = self._batches[key]
            if batch.first_arrival_at is None:
                batch.first_arrival_at = now
                self._emit("first_arrival", now, r.task, r.batch_id)
            batch.submitted += 1
            if batch.reward_type is None:  # a batch takes the type of its first request
                batch.reward_type = r.reward_type
            self._seq += 1
            rec = RequestRecord(
                tenant=r.tenant,
                task=r.task,
                batch_id=r.batch_id,
                request_id=r.request_id,
                reward_type=r.reward_type,
                payload=r.payload,
                arrived_at=now,
                stage=r.first_stage,
                stage_enqueued_at=now,
                seq=self._seq,
            )
            self._requests[(r.task, r.request_id)] = rec
            self._batch_requests[key].append(r.request_id)
            self._enqueue(rec)
            out.accepted.append(r.request_id)
        return out

    # leases ----------------------------------------------------------------------------------
    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        return self._take(stage, worker_id, now, ttl_s, holder)

    async def lease_many(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str | None = None
    ) -> list[Lease]:
        out: list[Lease] = []
        while len(out) < k and (got := self._take(stage, worker_id, now, ttl_s, holder)) is not None:
            out.append(got)
        return out

    def _take(self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None) -> Lease | None:
        q = self._queues.get(stage)
        while q:
            _, _, task, rid = heapq.heappop(q)
            rec = self._requests.get((task, rid))
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
                holder=worker_id if holder is None else holder,
                payload=rec.payload,
                artifacts=dict(rec.artifacts),
                deadline=now + ttl_s,
                attempt=rec.attempts,
                started_at=now,
            )
            self._leases[lease.lease_id] = lease
            return lease.model_copy()
        return None

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        await self._notify.wait(("work", stage), timeout_s)

    async def get_lease(self, lease_id: str) -> Lease | None:
        lease = self._leases.get(lease_id)
        return lease.model_copy() if lease else None

    def _live_lease(self, lease_id: str, holder: str, now: float) -> Lease:
        lease = self._leases.get(lease_id)
        if lease is None:
            raise UnknownLease(f"lease {lease_id!r} is unknown or already finished", field="lease_id")
        if lease.holder != holder:
            raise LeaseNotYours(f"lease {lease_id!r} was taken by another credential", field="lease_id")
        if lease.deadline < now:
            raise LeaseExpired(f"lease {lease_id!r} expired at {lease.deadline:.3f}", field="lease_id")
        return lease

    async def heartbeat(self, lease_id: str, holder: str, now: float, ttl_s: float) -> float:
        lease = self._live_lease(lease_id, holder, now)
        lease.deadline = now + ttl_s
        return lease.deadline

    async def complete(
        self,
        lease_id: str,
        holder: str,
        now: float,
        run_s: float,
        next_stage: str | None,
        artifacts: dict[str, str] | None,
        result: Result | None,
        outcome: str,
    ) -> CompleteOutcome:
        lease = self._live_lease(lease_id, holder, now)
        del self._leases[lease_id]
        rec = self._requests[(lease.task, lease.request_id)]
        rec.stages.append(
            StageRecord(
                name=lease.stage,
                worker=lease.worker_id,
                queued_s=max(0.0, lease.started_at - rec.stage_enqueued_at),
                run_s=run_s,
                outcome=outcome,
            )
        )
        if next_stage is not None:
            rec.stage = next_stage
            rec.stage_enqueued_at = now
            rec.state = RequestState.QUEUED
            rec.attempts = 0
            if artifacts is not None:
                rec.artifacts = artifacts
            self._enqueue(rec)
            return CompleteOutcome(request=rec.model_copy())
        final = result or Result(request_id=rec.request_id, status=Status.INTERNAL_ERROR)
        completed = self._finalize(rec, final, now)
        return CompleteOutcome(request=rec.model_copy(), batch_completed=completed)

    def _finalize(self, rec: RequestRecord, result: Result, now: float) -> bool:
        rec.state = RequestState.DONE
        rec.artifacts = {}
        rec.result = result.model_copy(update={"request_id": rec.request_id, "stages": list(rec.stages)})
        key = (rec.task, rec.batch_id)
        self._result_bytes[key] = self._result_bytes.get(key, 0) + len(rec.result.model_dump_json())
        batch = self._batches[key]
        batch.done += 1
        self._notify.notify(("batch", *key))
        if batch.done < batch.size or batch.complete:
            return False
        self._notify.notify(("complete", *key))
        records = [self._requests[(rec.task, rid)] for rid in self._batch_requests[key]]
        profile = finish_batch(batch, records, now)
        heapq.heappush(self._finished, (now, key))
        hist = self._history.setdefault(rec.task, deque(maxlen=self.history_batches))
        hist.append(profile)
        self._spans.append(SpanSample(batch.reward_type, now, profile.earliest_completion()))
        self._emit(
            "batch_completed",
            now,
            batch.task,
            batch.batch_id,
            extra_delay_s=batch.extra_delay_s,
            earliest_completion=batch.earliest_completion,
        )
        return True

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | StoreError]:
        out: list[float | StoreError] = []
        for lease_id in lease_ids:
            try:
                out.append(await self.heartbeat(lease_id, holder, now, ttl_s))
            except StoreError as exc:
                out.append(exc)
        return out

    async def complete_many(
        self, items: Sequence[CompletionItem], holder: str, now: float
    ) -> list[CompleteOutcome | StoreError]:
        out: list[CompleteOutcome | StoreError] = []
        for it in items:  # no await suspends inside: the bundle is one transition
            try:
                out.append(
                    await self.complete(
                        it.lease_id, holder, now, it.run_s, it.next_stage, it.artifacts, it.result, it.outcome
                    )
                )
            except StoreError as exc:
                out.append(exc)
        return out

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        lease = self._live_lease(lease_id, holder, now)
        del self._leases[lease_id]
        rec = self._requests[(lease.task, lease.request_id)]
        rec.state = RequestState.QUEUED
        rec.attempts -= 1
        self._enqueue(rec)  # same sort key: back at its place
        return lease.stage

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        expired = [lease for lease in self._leases.values() if lease.deadline < now]
        out: list[tuple[str, str]] = []
        for lease in expired:
            del self._leases[lease.lease_id]
            rec = self._requests[(lease.task, lease.request_id)]
            out.append((rec.request_id, lease.stage))
            self._emit("lease_expired", now, rec.task, rec.batch_id, stage=lease.stage, attempt=lease.attempt)
            if rec.attempts >= max_attempts:
                rec.stages.append(
                    StageRecord(name=lease.stage, worker=lease.worker_id, outcome="lease_expired")
                )
                self._finalize(
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
                self._enqueue(rec)
        return out

    # reads -----------------------------------------------------------------------------------
    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        rec = self._requests.get((task, request_id))
        return rec.model_copy() if rec else None

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        ids = self._batch_requests.get((task, batch_id), [])
        out = []
        for rid in ids:
            rec = self._requests[(task, rid)]
            if rec.result is not None:
                out.append(rec.result.model_copy())
        return out

    async def wait_batch(
        self, task: str, batch_id: str, timeout_s: float, until_complete: bool = False
    ) -> None:
        if until_complete:
            batch = self._batches.get((task, batch_id))
            if batch is None or batch.complete:  # completed (or gone) since the caller looked
                return
            await self._notify.wait(("complete", task, batch_id), timeout_s)
            return
        await self._notify.wait(("batch", task, batch_id), timeout_s)

    async def history(self, task: str) -> list[BatchProfile]:
        return list(self._history.get(task, ()))

    async def events(self, after: str, timeout_s: float, count: int = 100) -> list[Event]:
        def pending() -> list[Event]:
            a = int(after or 0)
            return [e for e in self._events if int(e.id) > a][:count]

        got = pending()
        if not got and timeout_s > 0:
            await self._notify.wait("events", timeout_s)
            got = pending()
        return got

    async def tenant_usage(self, tenant: str, now: float, exact: bool = False) -> TenantUsage:
        self._prune(now)  # always exact here: counted from the batches themselves
        out = TenantUsage()
        for key, b in self._batches.items():
            if b.tenant != tenant:
                continue
            out.queued += b.submitted - b.done
            if self._result_bytes.get(key):
                out.result_bytes += self._result_bytes[key]
                if b.completed_at is not None:
                    expiry = b.completed_at + self.result_ttl_s
                    out.next_expiry = expiry if out.next_expiry is None else min(out.next_expiry, expiry)
        return out

    async def snapshot(self, now: float, finished_types: Collection[str] = ()) -> Snapshot:
        snap = Snapshot(now=now)
        # Depth is counted from the records below: heaps may hold stale entries.
        snap.queue_depth = dict.fromkeys(self._queues, 0)
        for lease in self._leases.values():
            snap.running[lease.stage] = snap.running.get(lease.stage, 0) + 1
            snap.busy_workers.setdefault(lease.stage, []).append(lease.worker_id)
        by_request_lease = {(ls.task, ls.request_id): ls for ls in self._leases.values()}
        for key, batch in self._batches.items():
            if batch.complete:
                continue
            live = BatchLive(batch=batch.model_copy())
            sample = batch.reward_type in finished_types
            finished: list[RequestRecord] = []
            for rid in self._batch_requests[key]:
                rec = self._requests[(batch.task, rid)]
                if rec.state is RequestState.QUEUED:
                    live.queued[rec.stage] = live.queued.get(rec.stage, 0) + 1
                    live.queued_since.setdefault(rec.stage, []).append(rec.stage_enqueued_at)
                    snap.queue_depth[rec.stage] = snap.queue_depth.get(rec.stage, 0) + 1
                elif rec.state is RequestState.RUNNING:
                    ls = by_request_lease.get((batch.task, rid))
                    started = ls.started_at if ls else now
                    live.running_elapsed.setdefault(rec.stage, []).append(max(0.0, now - started))
                elif sample:
                    finished.append(rec)
            # evenly spaced over submission order; profiles only for the sample (a 16k batch
            # would otherwise cost 16k profiles per planner decision)
            live.finished = [request_profile(batch, rec).s for rec in finished_sample(finished)]
            snap.batches.append(live)
        return snap
