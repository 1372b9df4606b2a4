"""Batches and requests in Redis: registration (with the span prior of new tasks), submission
(idempotent, all or nothing per call) and reads of batch and request records."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from distrs.core.history import SPAN_SAMPLES, SpanSample, prior_span
from distrs.core.model import BatchInfo, RequestRecord
from distrs.store.base import NewRequest, SubmitOutcome
from distrs.store.redis.base import RedisBase, num, pairs


class BatchOps(RedisBase):
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
        prior = await self._prior_span(batch.reward_type, now)
        out = await self._run(
            "register_batch",
            [
                k.owner(t),
                k.batch(t, b),
                k.span(t),
                k.events(),
                k.active(),
                k.batch_members(t, b),
                k.batch_results(t, b),
                k.batch_queued(t, b),
                k.batch_profile(t, b),
                k.history(t),
                k.spans(),
            ],
            [
                batch.tenant,
                t,
                b,
                batch.size,
                batch.reward_type or "",
                "" if batch.rollout_started_at is None else num(batch.rollout_started_at),
                num(now),
                num(prior),
                self._events_maxlen,
            ],
        )
        return self._batch_from_hash(pairs(out[1])), bool(out[0])

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        bkey = self.keys.batch(task, batch_id)
        self._seen_result.set((bkey, self._results.generation(bkey)))  # see wait_batch
        h = await self._call(lambda: self._r.hgetall(self.keys.batch(task, batch_id)))
        return self._batch_from_hash(h) if h else None

    async def batch_extra_delay(self, task: str, batch_id: str) -> float | None:
        """Extra delay d = completion − T of a finished batch (None while it runs)."""
        v = await self._call(lambda: self._r.hget(self.keys.batch(task, batch_id), "extra_delay_s"))
        return None if v is None else float(v)

    # requests ------------------------------------------------------------------------------

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        if not requests:
            return SubmitOutcome()
        k = self.keys
        groups: dict[tuple[str, str, str], list[NewRequest]] = {}
        for r in requests:
            groups.setdefault((r.tenant, r.task, r.batch_id), []).append(r)
        keys = [k.seq(), k.events(), k.stages()]
        args: list[Any] = [num(now), self._policy, num(self.settings.default_batch_span_s)]
        args += [self._events_maxlen, k.work_channel(), len(groups)]
        order: list[NewRequest] = []
        for (tenant, task, batch_id), reqs in groups.items():
            keys += [k.owner(task), k.batch(task, batch_id)]
            args += [tenant, task, batch_id, len(reqs)]
            for r in reqs:
                keys += [k.request(task, r.request_id), k.queue(r.first_stage)]
                args += [r.request_id, r.reward_type, r.first_stage, orjson.dumps(r.payload).decode()]
                order.append(r)
        flags = await self._run("submit", keys, args)
        out = SubmitOutcome()
        for r, flag in zip(order, flags, strict=True):
            (out.accepted if int(flag) else out.duplicates).append(r.request_id)
        return out

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        h = await self._call(lambda: self._r.hgetall(self.keys.request(task, request_id)))
        return self._request_from_hash(h) if h else None
