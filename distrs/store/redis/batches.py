"""Batches and requests in Redis: registration (with the span prior of new tasks), submission
(idempotent, all or nothing per call; each request's whole route stored with it), reads of
batch and request records, and the route of a request that has none stored (``store_route``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import orjson

from distrs.core.history import SPAN_SAMPLES, SpanSample, prior_span
from distrs.core.model import BatchInfo, RequestRecord
from distrs.store.base import NewRequest, SubmitOutcome
from distrs.store.keys import Keys
from distrs.store.redis.records import batch_from_hash, num, pairs, request_from_hash
from distrs.store.redis.scripts import (
    REGISTER_BATCH,
    STORE_ROUTE,
    SUBMIT,
    RegisterArgs,
    RegisterKeys,
    StoreRouteArgs,
    StoreRouteKeys,
    SubmitArgs,
    SubmitGroup,
    SubmitKeys,
    SubmitRequest,
)
from distrs.store.redis.topology import Topology
from distrs.store.redis.wake import Wakeups, completed_key
from distrs.store.usage_deltas import UsageDeltas


def route_json(k: Keys, task: str, route: Sequence[str]) -> str:
    """A request's ``route`` field: JSON ``[[stage, queue key], ...]`` (``complete.lua`` moves
    the request on to the next stage's queue without building a key)."""
    return orjson.dumps([(s, k.queue(s, task)) for s in route]).decode()


class RedisBatches:
    """``BatchPart`` (store/composed.py) over a ``Topology``."""

    def __init__(self, topology: Topology, wake: Wakeups) -> None:
        self.topology = topology
        self.wake = wake

    async def _prior_span(self, reward_type: str | None, now: float) -> float:
        """The span prior of a task with no history (``core.history.prior_span``) from the recent
        finished batches of all tasks; the script uses it only when the task has none itself."""
        topo = self.topology
        raw = await topo.call(lambda: topo.client.lrange(topo.keys.spans(), 0, SPAN_SAMPLES - 1))
        samples = []
        for item in raw:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                d = orjson.loads(item)
                samples.append(SpanSample(d.get("rt"), float(d["at"]), float(d["span"])))
        return prior_span(samples, reward_type, now, topo.settings.default_batch_span_s)

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        topo = self.topology
        k = topo.keys
        t, b = batch.task, batch.batch_id
        slot = k.slot_of(t)
        await topo.task_registered(t, now)
        keys = RegisterKeys(
            owner=k.owner(t),
            batch=k.batch(t, b),
            span=k.span(t),
            events=k.script_events(slot),
            active=k.active(slot),
            members=k.batch_members(t, b),
            results=k.batch_results(t, b),
            queued=k.batch_queued(t, b),
            profile=k.batch_profile(t, b),
            history=k.history(t),
            spans=k.script_spans(slot),
        )

        async def register(prior: str) -> Any:
            args = RegisterArgs(
                tenant=batch.tenant,
                task=t,
                batch_id=b,
                size=batch.size,
                reward_type=batch.reward_type or "",
                rollout="" if batch.rollout_started_at is None else num(batch.rollout_started_at),
                now=num(now),
                prior=prior,
                maxlen=topo.events_maxlen,
            )
            return await topo.run(REGISTER_BATCH, keys, args, acked=True)

        # the span prior (a read of the recent spans of all tasks) only when the script needs it:
        # for the first batch of a task without history (register_batch.lua)
        out = await register("")
        if out[0] == 2:
            out = await register(num(await self._prior_span(batch.reward_type, now)))
        return batch_from_hash(pairs(out[1])), bool(out[0])

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        topo = self.topology
        bkey = topo.keys.batch(task, batch_id)
        # the generations before the read (wake.py): a wake-up that comes after it, even one
        # handled before this coroutine resumes, must make the next wait return at once
        done = completed_key(bkey)
        done_gen = self.wake.results.generation(done)
        self.wake.saw_result(bkey)
        h = await topo.call(lambda: topo.client.hgetall(bkey))
        if not h:
            return None
        batch = batch_from_hash(h)
        if not batch.complete:  # its caller may wait for the completion next
            self.wake.saw_result(done, done_gen)
        return batch

    async def submit(
        self, requests: list[NewRequest], now: float
    ) -> tuple[SubmitOutcome, UsageDeltas | None]:
        """One script per group the topology makes (all of them standalone, one per task in a
        cluster), all or nothing per group. When one group fails the others may have landed;
        the error is raised and a retry of the whole call finds them as duplicates."""
        topo = self.topology
        base = await topo.arrival_base(len(requests))
        uncounted = topo.uncounted()
        calls = []
        for group in topo.script_groups(requests):
            order, call = self._submit_call(requests, group, now, base, uncounted)
            calls.append((order, call))
            base += len(group)
        results = await asyncio.gather(*(c for _, c in calls), return_exceptions=True)
        # the queues that may have gained work (cluster: into the ready index), failed parts too
        await topo.work_queued((r.first_stage, r.task) for r in requests)
        accepted = [False] * len(requests)
        for res, (order, _) in zip(results, calls, strict=True):
            if isinstance(res, BaseException):
                raise res
            for i, flag in zip(order, res, strict=True):
                accepted[i] = bool(int(flag))
        out = SubmitOutcome()
        for r, ok in zip(requests, accepted, strict=True):
            (out.accepted if ok else out.duplicates).append(r.request_id)
        return out, uncounted

    def _submit_call(
        self,
        requests: list[NewRequest],
        group: list[int],
        now: float,
        seq: int,
        uncounted: UsageDeltas | None,
    ) -> tuple[list[int], Any]:
        """The submit script of the requests at ``group`` (one slot) and the positions of its
        answers."""
        topo = self.topology
        k = topo.keys
        slot = k.slot_of(requests[group[0]].task)
        by_batch: dict[tuple[str, str, str], list[int]] = {}
        for i in group:
            r = requests[i]
            by_batch.setdefault((r.tenant, r.task, r.batch_id), []).append(i)
        groups: list[SubmitGroup] = []
        rows: list[SubmitRequest] = []
        order: list[int] = []
        for (tenant, task, batch_id), positions in by_batch.items():
            groups.append(
                SubmitGroup(k.owner(task), k.batch(task, batch_id), tenant, task, batch_id, len(positions))
            )
            for i in positions:
                r = requests[i]
                route = route_json(k, task, r.route) if len(r.route) > 1 else ""
                rows.append(
                    SubmitRequest(
                        request=k.request(task, r.request_id),
                        queue=k.queue(r.first_stage, task),
                        request_id=r.request_id,
                        reward_type=r.reward_type,
                        stage=r.first_stage,
                        payload=orjson.dumps(r.payload).decode(),
                        route=route,
                    )
                )
                order.append(i)
        keys = SubmitKeys(seq=k.script_seq(slot), events=k.script_events(slot), stages=k.stages(slot))
        args = SubmitArgs(num(now), topo.policy, topo.events_maxlen, k.work_channel(), *k.usage_prefixes())
        call = topo.run(SUBMIT, keys, args, groups, rows, acked=True, seq=seq, usage=uncounted)
        return order, call

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        topo = self.topology
        h = await topo.call(lambda: topo.client.hgetall(topo.keys.request(task, request_id)))
        return request_from_hash(h) if h else None

    async def store_route(self, task: str, request_id: str, route: Sequence[str]) -> bool:
        """The route as submit would have stored it, where the request has none
        (``store_route.lua``); a route of one stage is stored as none (submit stores none)."""
        if len(route) < 2:
            return False
        topo = self.topology
        k = topo.keys
        keys = StoreRouteKeys(k.request(task, request_id))
        return bool(await topo.run(STORE_ROUTE, keys, StoreRouteArgs(route_json(k, task, route))))
