"""What the memory store keeps, shared by its parts, and the steps more than one part takes.

Everything lives in this process's memory; a restart loses it. Queues are binary heaps keyed by
``core.priority.sort_key``; long-polls park on a ``Notifier``. No method of a part awaits before
its state change, so each one is atomic on the event loop.
"""

from __future__ import annotations

import heapq
from collections import deque

from distrs.core.accounting import finish_batch
from distrs.core.history import SPAN_SAMPLES, BatchProfile, SpanSample
from distrs.core.model import BatchInfo, Lease, RequestRecord, RequestState, Result
from distrs.core.priority import QueuePolicy, sort_key
from distrs.store.base import Event
from distrs.store.notify import Notifier

_HeapItem = tuple[float, int, str, str]  # (primary, seq, task, request_id)
BatchKey = tuple[str, str]  # (task, batch id)


class MemoryState:
    """The records of every part (module docstring)."""

    def __init__(
        self,
        policy: QueuePolicy,
        history_batches: int,
        default_batch_span_s: float,
        max_events: int,
        result_ttl_s: float,
    ) -> None:
        self.policy = policy
        self.history_batches = history_batches
        self.default_batch_span_s = default_batch_span_s
        self.result_ttl_s = result_ttl_s
        self.batches: dict[BatchKey, BatchInfo] = {}
        self.batch_requests: dict[BatchKey, list[str]] = {}
        self.result_bytes: dict[BatchKey, int] = {}  # per batch: JSON bytes of its results
        self.finished: list[tuple[float, BatchKey]] = []  # (completed_at, batch key) heap
        self.task_owner: dict[str, str] = {}
        self.requests: dict[tuple[str, str], RequestRecord] = {}
        self.queues: dict[str, list[_HeapItem]] = {}
        self.leases: dict[str, Lease] = {}
        self.history: dict[str, deque[BatchProfile]] = {}
        self.spans: deque[SpanSample] = deque(maxlen=SPAN_SAMPLES)  # all tasks, newest last
        self.events: deque[Event] = deque(maxlen=max_events)
        self.event_seq = 0
        self.seq = 0
        self.notify = Notifier()

    def emit(self, type_: str, ts: float, task: str = "", batch_id: str = "", **data: object) -> None:
        self.event_seq += 1
        self.events.append(
            Event(id=str(self.event_seq), type=type_, ts=ts, task=task, batch_id=batch_id, data=dict(data))
        )
        self.notify.notify("events")

    def enqueue(self, rec: RequestRecord) -> None:
        batch = self.batches[(rec.task, rec.batch_id)]
        primary, seq = sort_key(self.policy, batch.estimated_completion or 0.0, rec.seq)
        heapq.heappush(self.queues.setdefault(rec.stage, []), (primary, seq, rec.task, rec.request_id))
        self.notify.notify_one(("work", rec.stage))

    def owned(self, tenant: str, task: str) -> bool:
        owner = self.task_owner.get(task)
        return owner is None or owner == tenant

    def prune(self, now: float) -> None:
        """Forget finished batches (and their requests) older than ``result_ttl_s``.

        Finished batches wait in a heap by completion time, so a call looks only at those due
        (every registration prunes: scanning every batch kept for a week cost each registration
        time in proportion to all the batches ever finished)."""
        cutoff = now - self.result_ttl_s
        old: list[BatchKey] = []
        heap = self.finished
        while heap and heap[0][0] < cutoff:
            done_at, key = heapq.heappop(heap)
            b = self.batches.get(key)
            if b is not None and b.completed_at == done_at:  # not a batch registered again since
                old.append(key)
        for key in old:
            for rid in self.batch_requests.pop(key, []):
                self.requests.pop((key[0], rid), None)
            del self.batches[key]
            self.result_bytes.pop(key, None)

    def finish(self, rec: RequestRecord, result: Result, now: float) -> bool:
        """Record ``rec``'s final result (exactly once, its bytes counted) and complete its batch
        when it is the last; True when the batch completed."""
        rec.state = RequestState.DONE
        rec.artifacts = {}
        rec.result = result.model_copy(update={"request_id": rec.request_id, "stages": list(rec.stages)})
        key = (rec.task, rec.batch_id)
        self.result_bytes[key] = self.result_bytes.get(key, 0) + len(rec.result.model_dump_json())
        batch = self.batches[key]
        batch.done += 1
        self.notify.notify(("batch", *key))
        if batch.done < batch.size or batch.complete:
            return False
        self.notify.notify(("complete", *key))
        records = [self.requests[(rec.task, rid)] for rid in self.batch_requests[key]]
        profile = finish_batch(batch, records, now)
        heapq.heappush(self.finished, (now, key))
        hist = self.history.setdefault(rec.task, deque(maxlen=self.history_batches))
        hist.append(profile)
        self.spans.append(SpanSample(batch.reward_type, now, profile.earliest_completion()))
        self.emit(
            "batch_completed",
            now,
            batch.task,
            batch.batch_id,
            extra_delay_s=batch.extra_delay_s,
            earliest_completion=batch.earliest_completion,
        )
        return True
