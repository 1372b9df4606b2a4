"""Results, history, events and the planner's snapshot, read from memory."""

from __future__ import annotations

from collections.abc import Collection

from distrs.core.accounting import request_profile
from distrs.core.history import BatchProfile, finished_sample
from distrs.core.model import RequestRecord, RequestState, Result
from distrs.store.base import BatchLive, Event, Snapshot
from distrs.store.memory.state import MemoryState


class MemoryResults:
    """``ResultPart`` (store/composed.py) over ``MemoryState``."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        s = self.s
        out = []
        for rid in s.batch_requests.get((task, batch_id), []):
            rec = s.requests[(task, rid)]
            if rec.result is not None:
                out.append(rec.result.model_copy())
        return out

    async def wait_batch(self, task: str, batch_id: str, timeout_s: float, until_complete: bool) -> None:
        if until_complete:
            batch = self.s.batches.get((task, batch_id))
            if batch is None or batch.complete:  # completed (or gone) since the caller looked
                return
            await self.s.notify.wait(("complete", task, batch_id), timeout_s)
            return
        await self.s.notify.wait(("batch", task, batch_id), timeout_s)

    async def history(self, task: str) -> list[BatchProfile]:
        return list(self.s.history.get(task, ()))

    async def events(self, after: str, timeout_s: float, count: int) -> list[Event]:
        def pending() -> list[Event]:
            a = int(after or 0)
            return [e for e in self.s.events if int(e.id) > a][:count]

        got = pending()
        if not got and timeout_s > 0:
            await self.s.notify.wait("events", timeout_s)
            got = pending()
        return got

    async def snapshot(self, now: float, finished_types: Collection[str]) -> Snapshot:
        s = self.s
        snap = Snapshot(now=now)
        # Depth is counted from the records below: heaps may hold stale entries.
        snap.queue_depth = dict.fromkeys(s.queues, 0)
        for lease in s.leases.values():
            snap.running[lease.stage] = snap.running.get(lease.stage, 0) + 1
            snap.busy_workers.setdefault(lease.stage, []).append(lease.worker_id)
        by_request_lease = {(ls.task, ls.request_id): ls for ls in s.leases.values()}
        for key, batch in s.batches.items():
            if batch.complete:
                continue
            live = BatchLive(batch=batch.model_copy())
            sample = batch.reward_type in finished_types
            finished: list[RequestRecord] = []
            for rid in s.batch_requests[key]:
                rec = s.requests[(batch.task, rid)]
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
