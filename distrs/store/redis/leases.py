"""Leases in Redis: taking the heads of a stage queue, heartbeats, completion, release and the
requeue of expired leases, each one Lua script; plus the wait for work.

A completion names only its lease and its outcome: the script moves the request on along the
route stored with it at submit (``complete.lua``), so nothing about the request (its payload,
its reward type, its task) is read or remembered here first. Leases of a bundle that live in
different slots (cluster mode) go to one script per slot, answered in the caller's order.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

import orjson

from distrs.core.model import Completion, Lease, Result, Status
from distrs.store import errors
from distrs.store.base import CompleteOutcome
from distrs.store.redis.records import num, pairs, request_from_hash, script_error
from distrs.store.redis.scripts import (
    COMPLETE,
    GET_LEASE,
    HEARTBEAT,
    LEASE,
    RELEASE,
    REQUEUE_EXPIRED,
    CompleteArgs,
    CompleteItem,
    GetLeaseKeys,
    HeartbeatArgs,
    HeartbeatKeys,
    LeaseArgs,
    LeaseKeys,
    LeaseRef,
    NewLease,
    NoArgs,
    ReleaseArgs,
    ReleaseKeys,
    RequeueArgs,
    TransitionArgs,
    TransitionKeys,
)
from distrs.store.redis.topology import Topology
from distrs.store.redis.wake import Wakeups
from distrs.store.usage_deltas import UsageDeltas

# The most expired leases one requeue script handles before yielding Redis to other clients.
REQUEUE_CHUNK = 200


def by_slot(slots: Iterable[int | None]) -> dict[int | None, list[int]]:
    """Positions grouped by slot, in input order (one script per slot)."""
    out: dict[int | None, list[int]] = {}
    for i, s in enumerate(slots):
        out.setdefault(s, []).append(i)
    return out


async def per_slot(slots: Iterable[int | None], run: Any) -> list[Any]:
    """``run(positions)`` once per slot (concurrently when there are several), its answers back
    in the caller's order."""
    groups = list(by_slot(slots).values())
    if len(groups) == 1:
        return list(await run(groups[0]))
    parts = await asyncio.gather(*(run(pos) for pos in groups))
    out: list[Any] = [None] * sum(len(p) for p in groups)
    for pos, part in zip(groups, parts, strict=True):
        for i, x in zip(pos, part, strict=True):
            out[i] = x
    return out


class RedisLeases:
    """``LeasePart`` (store/composed.py) over a ``Topology``."""

    def __init__(self, topology: Topology, wake: Wakeups) -> None:
        self.topology = topology
        self.wake = wake
        self._lease_prefix = uuid.uuid4().hex[:16]
        self._lease_counter = itertools.count(1)
        self._shared = self._transition_args()  # the same for every transition of this store
        self._tkeys: dict[int | None, TransitionKeys] = {}

    def _new_lease_id(self, slot: int | None) -> str:
        # unique across processes (random per-store prefix) without a urandom call per lease; in
        # cluster mode led by the slot of the lease's keys (keys.py)
        lid = f"{self._lease_prefix}{next(self._lease_counter):x}"
        return lid if slot is None else f"{slot:04x}{lid}"

    def _transition_keys(self, slot: int | None) -> TransitionKeys:
        """The keys of a transition in ``slot`` (made once per slot: they never change)."""
        got = self._tkeys.get(slot)
        if got is None:
            k = self.topology.keys
            got = self._tkeys[slot] = TransitionKeys(
                k.leases(slot), k.script_events(slot), k.active(slot), k.stages(slot)
            )
        return got

    def _transition_args(self) -> TransitionArgs:
        topo = self.topology
        k, s = topo.keys, topo.settings
        return TransitionArgs(
            topo.policy,
            s.result_ttl_s,
            s.history_batches,
            topo.events_maxlen,
            k.work_channel(),
            k.result_channel(),
            *k.usage_prefixes(),
        )

    # taking --------------------------------------------------------------------------------

    def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str
    ) -> Awaitable[list[Lease]]:
        """Up to ``k`` heads of ``stage`` (an awaitable: no coroutine of its own)."""
        self.wake.saw_work(stage)
        topo = self.topology
        keys = topo.keys
        args = LeaseArgs(num(now), num(ttl_s), worker_id, stage, holder)

        async def take_from(queue: str, slot: int | None, bound: str, n: int) -> list[Lease]:
            ids = [self._new_lease_id(slot) for _ in range(n)]
            new = [NewLease(keys.lease(i), i) for i in ids]
            rows = await topo.run(LEASE, LeaseKeys(queue, keys.leases(slot)), args, new, bound=bound)
            if len(rows) == 1:  # one lease per call: the common case, without the generality below
                return [self._handed_out(ids[0], rows[0], stage, worker_id, holder, now)]
            return [
                self._handed_out(lease_id, row, stage, worker_id, holder, now)
                for lease_id, row in zip(ids, rows, strict=False)
            ]

        return topo.take(stage, k, take_from)

    @staticmethod
    def _handed_out(
        lease_id: str, row: list[Any], stage: str, worker_id: str, holder: str, now: float
    ) -> Lease:
        request_id, task, batch_id, reward_type, payload, artifacts, attempt, deadline = row
        return Lease(
            lease_id=lease_id,
            request_id=request_id,
            task=task,
            batch_id=batch_id,
            reward_type=reward_type,
            stage=stage,
            worker_id=worker_id,
            holder=holder,
            payload=orjson.loads(payload),
            artifacts=orjson.loads(artifacts or "{}"),
            deadline=float(deadline),
            attempt=int(attempt),
            started_at=now,
        )

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        await self.wake.wait_work(stage, timeout_s)

    async def get_lease(self, lease_id: str) -> Lease | None:
        """A live lease as it was handed out (None once finished or requeued)."""
        out = await self.topology.run(GET_LEASE, GetLeaseKeys(self.topology.keys.lease(lease_id)), NoArgs())
        if not out:
            return None
        (
            request_id,
            task,
            batch_id,
            stage,
            worker,
            deadline,
            attempt,
            started,
            rtype,
            payload,
            arts,
            holder,
        ) = out
        return Lease(
            lease_id=lease_id,
            request_id=request_id,
            task=task,
            batch_id=batch_id,
            reward_type=rtype,
            stage=stage,
            worker_id=worker,
            holder=holder or "",
            payload=orjson.loads(payload or "{}"),
            artifacts=orjson.loads(arts or "{}"),
            deadline=float(deadline),
            attempt=int(attempt),
            started_at=float(started),
        )

    # held leases ---------------------------------------------------------------------------

    async def heartbeat(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | errors.StoreError]:
        topo = self.topology
        k = topo.keys
        args = HeartbeatArgs(num(now), num(ttl_s), holder)

        async def run(positions: list[int]) -> list[float | errors.StoreError]:
            ids = [lease_ids[i] for i in positions]
            keys = HeartbeatKeys(k.leases(k.lease_slot(ids[0])))
            rows = await topo.run(HEARTBEAT, keys, args, [LeaseRef(k.lease(i), i) for i in ids])
            return [float(row[1]) if row[0] == "ok" else script_error(row[1], row[2]) for row in rows]

        if len(lease_ids) == 1:
            return await run([0])
        return await per_slot((k.lease_slot(i) for i in lease_ids), run)

    def complete(
        self, items: Sequence[Completion], holder: str, now: float
    ) -> Awaitable[tuple[list[CompleteOutcome | errors.StoreError], UsageDeltas | None]]:
        """Finish ``items``: one script per slot (one, standalone); an awaitable of the answers
        in order and the usage counts the scripts left uncounted."""
        args = CompleteArgs(num(now), holder)
        uncounted = self.topology.uncounted()
        if len(items) == 1:
            return self._complete_in_slot(items, args, uncounted)
        return self._complete_per_slot(items, args, uncounted)

    async def _complete_per_slot(
        self, items: Sequence[Completion], args: CompleteArgs, uncounted: UsageDeltas | None
    ) -> tuple[list[CompleteOutcome | errors.StoreError], UsageDeltas | None]:
        k = self.topology.keys

        async def run(positions: list[int]) -> list[CompleteOutcome | errors.StoreError]:
            outs, _ = await self._complete_in_slot([items[i] for i in positions], args, uncounted)
            return outs

        return await per_slot((k.lease_slot(it.lease_id) for it in items), run), uncounted

    async def _complete_in_slot(
        self, items: Sequence[Completion], args: CompleteArgs, uncounted: UsageDeltas | None
    ) -> tuple[list[CompleteOutcome | errors.StoreError], UsageDeltas | None]:
        """``complete`` of leases of one slot (all of them, standalone)."""
        topo = self.topology
        k = topo.keys
        rows = [_complete_item(k.lease(it.lease_id), it) for it in items]
        keys = self._transition_keys(k.lease_slot(items[0].lease_id))
        answers = await topo.run(COMPLETE, keys, args, rows, shared=self._shared, acked=True, usage=uncounted)
        outs: list[CompleteOutcome | errors.StoreError] = [
            CompleteOutcome(request=request_from_hash(pairs(a[2])), batch_completed=bool(a[1]))
            if a[0] == "ok"
            else script_error(a[1], a[2])
            for a in answers
        ]
        # requests moved on: their next stage's queue gained work (cluster: the ready index)
        if any(it.outcome == "next" for it in items):
            moved = [
                (o.request.stage, o.request.task)
                for o in outs
                if isinstance(o, CompleteOutcome) and o.next_stage is not None
            ]
            await topo.work_queued(moved)
        return outs, uncounted

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        topo = self.topology
        k = topo.keys
        slot = k.lease_slot(lease_id)
        keys = ReleaseKeys(k.lease(lease_id), k.leases(slot), k.stages(slot))
        stage, task = await topo.run(
            RELEASE, keys, ReleaseArgs(num(now), holder, lease_id, topo.policy, k.work_channel())
        )
        await topo.work_queued([(stage, task)])
        return str(stage)

    async def requeue_expired(
        self, now: float, max_attempts: int
    ) -> tuple[list[tuple[str, str]], UsageDeltas | None]:
        topo = self.topology
        uncounted = topo.uncounted()
        slots = await topo.expiring_slots(now)
        parts = await asyncio.gather(*(self._requeue_slot(s, now, max_attempts, uncounted) for s in slots))
        # requeued work: its tasks' queues gained work (cluster: the ready index)
        await topo.work_queued((stage, task) for part in parts for _, task, stage in part)
        await topo.swept(now)
        return [(rid, stage) for part in parts for rid, _, stage in part], uncounted

    async def _requeue_slot(
        self, slot: int | None, now: float, max_attempts: int, uncounted: UsageDeltas | None
    ) -> list[tuple[str, str, str]]:
        """(request id, task, stage) of the expired leases of one slot's lease index."""
        topo = self.topology
        args, shared = RequeueArgs(num(now), max_attempts, REQUEUE_CHUNK), self._shared
        affected: list[tuple[str, str, str]] = []
        while True:
            out = await topo.run(
                REQUEUE_EXPIRED, self._transition_keys(slot), args, shared=shared, usage=uncounted
            )
            affected += list(zip(out[1::3], out[2::3], out[3::3], strict=True))
            if int(out[0]) < REQUEUE_CHUNK:
                return affected


def _complete_item(lease_key: str, it: Completion) -> CompleteItem:
    """The script's row of one completion: for ``final`` the result JSON without request_id
    and stages (the script splices them in) and its status."""
    artifacts = orjson.dumps(it.artifacts).decode() if it.artifacts is not None else ""
    if it.outcome == "next":
        return CompleteItem(lease_key, it.lease_id, num(it.run_s), it.outcome, artifacts, "", "")
    final = it.result or Result(request_id="", status=Status.INTERNAL_ERROR)
    body = final.model_dump_json(exclude={"stages", "request_id"})
    return CompleteItem(
        lease_key, it.lease_id, num(it.run_s), it.outcome, artifacts, body, final.status.value
    )
