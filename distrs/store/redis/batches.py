"""Batches and requests in Redis: registration (with the span prior of new tasks), submission
(idempotent, all or nothing per call) and reads of batch and request records."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from distrs.core.history import SPAN_SAMPLES, SpanSample, prior_span
from distrs.core.model import BatchInfo, RequestRecord
from distrs.store.base import NewRequest, SubmitOutcome
from distrs.store.redis.base import completed_key, num, pairs
from distrs.store.redis.ready import ReadyOps


class BatchOps(ReadyOps):
    """``register_batch``, ``get_batch``, ``submit``, ``get_request`` (QueueStore)."""

    async def _prior_span(self, reward_type: str | None, now: float) -> float:
        """The span prior of a task with no history (``core.history.prior_span``) from the recent
        finished batches of all tasks; the script uses it only when the task has none itself."""
        raw = await self._call(lambda: self._r.lrange(self.keys.spans(), 0, SPAN_SAMPLES - 1))
        samples = []
        for item in raw:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                d = orjson.loads(item)
                samples.append(SpanSample(d.get("rt"), float(d["at"]), float(d["span"])))
        return prior_span(samples, reward_type, now, self.settings.default_batch_span_s)

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        k = self.keys
        t, b = batch.task, batch.batch_id
        slot = k.slot_of(t)
        if self.cluster:
            # into the registry first: a task is visible to leases, the reaper and the snapshot
            # before it can have work (a crash right after leaves only a harmless entry)
            await self._call(lambda: self._r.zadd(k.tasks(), {t: now}, gt=True))
            self._tasks.add(t)
        keys = [
            k.owner(t),
            k.batch(t, b),
            k.span(t),
            k.unused(slot) if self.cluster else k.events(),
            k.active(slot),
            k.batch_members(t, b),
            k.batch_results(t, b),
            k.batch_queued(t, b),
            k.batch_profile(t, b),
            k.history(t),
            k.unused(slot) if self.cluster else k.spans(),
        ]

        async def register(prior: str) -> Any:
            args = [
                batch.tenant,
                t,
                b,
                batch.size,
                batch.reward_type or "",
                "" if batch.rollout_started_at is None else num(batch.rollout_started_at),
                num(now),
                prior,
                self._events_maxlen,
            ]
            return await self._run("register_batch", keys, args, acked=True)

        # the span prior (a read of the recent spans of all tasks) only when the script needs it:
        # for the first batch of a task without history (register_batch.lua)
        out = await register("")
        if out[0] == 2:
            out = await register(num(await self._prior_span(batch.reward_type, now)))
        return self._batch_from_hash(pairs(out[1])), bool(out[0])

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        bkey = self.keys.batch(task, batch_id)
        # the generations before the read (see wait_batch): a wake-up that comes after it, even
        # one handled before this coroutine resumes, must make the next wait return at once
        done = completed_key(bkey)
        seen_done = (done, self._results.generation(done))
        self._seen_result.set((bkey, self._results.generation(bkey)))
        h = await self._call(lambda: self._r.hgetall(bkey))
        if not h:
            return None
        batch = self._batch_from_hash(h)
        if not batch.complete:  # its caller may wait for the completion next
            self._seen_result.set(seen_done)
        return batch

    async def batch_extra_delay(self, task: str, batch_id: str) -> float | None:
        """Extra delay d = completion − T of a finished batch (None while it runs)."""
        v = await self._call(lambda: self._r.hget(self.keys.batch(task, batch_id), "extra_delay_s"))
        return None if v is None else float(v)

    # requests ------------------------------------------------------------------------------

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        if not requests:
            return SubmitOutcome()
        if self.cluster:
            return await self._submit_per_task(requests, now)
        k = self.keys
        groups: dict[tuple[str, str, str], list[NewRequest]] = {}
        for r in requests:
            groups.setdefault((r.tenant, r.task, r.batch_id), []).append(r)
        keys = [k.seq(), k.events(), k.stages()]
        args: list[Any] = [num(now), self._policy, num(self.settings.default_batch_span_s)]
        args += [self._events_maxlen, k.work_channel(), len(groups), *k.usage_prefixes()]
        order: list[NewRequest] = []
        for (tenant, task, batch_id), reqs in groups.items():
            keys += [k.owner(task), k.batch(task, batch_id)]
            args += [tenant, task, batch_id, len(reqs)]
            for r in reqs:
                keys += [k.request(task, r.request_id), k.queue(r.first_stage)]
                args += [r.request_id, r.reward_type, r.first_stage, orjson.dumps(r.payload).decode()]
                order.append(r)
        flags = await self._run("submit", keys, args, acked=True)
        out = SubmitOutcome()
        for r, flag in zip(order, flags, strict=True):
            (out.accepted if int(flag) else out.duplicates).append(r.request_id)
        return out

    async def _submit_per_task(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        """Cluster mode: one submit script per task (each task is its own slot), all or nothing
        per task. The arrival sequences come from one INCRBY of the global counter, so queue
        members keep one deployment-wide order; the tasks are then marked in the stages' ready
        index. When one task's part fails the others may have
        landed; the error is raised and a retry of the whole call finds them as duplicates."""
        k = self.keys
        by_task: dict[str, list[tuple[int, NewRequest]]] = {}
        for i, r in enumerate(requests):
            by_task.setdefault(r.task, []).append((i, r))
        top = int(await self._call(lambda: self._r.incrby(k.seq(), len(requests))))
        base = top - len(requests)
        calls = []
        for task, reqs in by_task.items():
            slot = k.slot_of(task)
            groups: dict[tuple[str, str], list[tuple[int, NewRequest]]] = {}
            for i, r in reqs:
                groups.setdefault((r.tenant, r.batch_id), []).append((i, r))
            keys = [k.unused(slot), k.unused(slot), k.stages(slot)]
            args: list[Any] = [num(now), self._policy, num(self.settings.default_batch_span_s)]
            args += [self._events_maxlen, k.work_channel(), len(groups), *k.usage_prefixes()]
            for (tenant, batch_id), group in groups.items():
                keys += [k.owner(task), k.batch(task, batch_id)]
                args += [tenant, task, batch_id, len(group)]
                for _, r in group:
                    keys += [k.request(task, r.request_id), k.queue(r.first_stage, task)]
                    args += [r.request_id, r.reward_type, r.first_stage, orjson.dumps(r.payload).decode()]
            calls.append(
                (
                    self._run("submit", keys, args, seq=base, acked=True),
                    [ir for g in groups.values() for ir in g],
                )
            )
            base += len(reqs)
        results = await asyncio.gather(*(c for c, _ in calls), return_exceptions=True)
        # the queues that may have gained work, into the ready index (ready.py), failed parts too
        await self._mark_ready((r.first_stage, r.task) for r in requests)
        flags: list[tuple[int, NewRequest, int]] = []
        for res, (_, order) in zip(results, calls, strict=True):
            if isinstance(res, BaseException):
                raise res
            flags += [(i, r, int(flag)) for (i, r), flag in zip(order, res, strict=True)]
        out = SubmitOutcome()
        for _, r, flag in sorted(flags, key=lambda x: x[0]):
            (out.accepted if flag else out.duplicates).append(r.request_id)
        return out

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        h = await self._call(lambda: self._r.hgetall(self.keys.request(task, request_id)))
        return self._request_from_hash(h) if h else None
