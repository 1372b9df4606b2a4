"""Batches and requests in memory: registration (with the span prior of new tasks), submission
(idempotent, all or nothing per call), reads of batch and request records, and the route of a
request that has none stored (``store_route``)."""

from __future__ import annotations

from collections.abc import Sequence

from distrs.core.history import estimate_completion, prior_span
from distrs.core.model import BatchInfo, RequestRecord
from distrs.store.base import NewRequest, SubmitOutcome
from distrs.store.errors import BatchConflict, BatchFull, UnknownBatch
from distrs.store.memory.state import MemoryState


class MemoryBatches:
    """``BatchPart`` (store/composed.py) over ``MemoryState``."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        s = self.s
        s.prune(now)
        if not s.owned(batch.tenant, batch.task):
            raise UnknownBatch(f"task {batch.task!r} not found", field="task")
        key = (batch.task, batch.batch_id)
        existing = s.batches.get(key)
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
        hist = list(s.history.get(batch.task, ()))
        prior = s.default_batch_span_s
        if not hist:
            prior = prior_span(s.spans, batch.reward_type, now, s.default_batch_span_s)
        new.estimated_completion = estimate_completion(hist, new.anchor, prior)
        s.task_owner.setdefault(batch.task, batch.tenant)
        s.batches[key] = new
        s.batch_requests[key] = []
        s.emit("batch_registered", now, new.task, new.batch_id, size=new.size)
        return new.model_copy(), True

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        b = self.s.batches.get((task, batch_id))
        return b.model_copy() if b else None

    async def submit(self, requests: list[NewRequest], now: float) -> tuple[SubmitOutcome, None]:
        """The usage is counted from the records themselves (``MemoryUsage``): nothing is left."""
        s = self.s
        out = SubmitOutcome()
        fresh: list[NewRequest] = []
        added: dict[tuple[str, str], int] = {}
        seen: set[tuple[str, str]] = set()
        for r in requests:  # validate the whole call first: all or nothing
            key = (r.task, r.batch_id)
            batch = s.batches.get(key)
            if batch is None or not s.owned(r.tenant, r.task):
                raise UnknownBatch(
                    f"batch {r.batch_id!r} of task {r.task!r} is not registered (POST /v1/batches first)",
                    field="batch_id",
                )
            if (r.task, r.request_id) in s.requests or (r.task, r.request_id) in seen:
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
            batch = s.batches[key]
            if batch.first_arrival_at is None:
                batch.first_arrival_at = now
                s.emit("first_arrival", now, r.task, r.batch_id)
            batch.submitted += 1
            if batch.reward_type is None:  # a batch takes the type of its first request
                batch.reward_type = r.reward_type
            s.seq += 1
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
                seq=s.seq,
                route=list(r.route),
            )
            s.requests[(r.task, r.request_id)] = rec
            s.batch_requests[key].append(r.request_id)
            s.enqueue(rec)
            out.accepted.append(r.request_id)
        return out, None

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        rec = self.s.requests.get((task, request_id))
        return rec.model_copy() if rec else None

    async def store_route(self, task: str, request_id: str, route: Sequence[str]) -> bool:
        """As Redis, which keeps no route for a route of one stage: a record whose route has at
        most one stage has none stored, and only a longer route is stored."""
        rec = self.s.requests.get((task, request_id))
        if rec is None or len(rec.route) > 1 or len(route) < 2:
            return False
        rec.route = list(route)
        return True
