"""Leases in Redis: taking the heads of a stage queue (one or a bundle), heartbeats, completion,
release and the requeue of expired leases, each one Lua script; plus the wait for work."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

import orjson

from distrs.core.model import Lease, Result, Status
from distrs.store import errors
from distrs.store.base import CompleteOutcome, CompletionItem
from distrs.store.redis.base import num, pairs
from distrs.store.redis.cluster import LEASE_ROUNDS, bound_of, by_slot, order_heads
from distrs.store.redis.ready import ReadyOps

T = TypeVar("T")

# Leases handed out by this process remembered for get_lease (oldest forgotten first).
LEASE_CACHE_SIZE = 4096
# The most expired leases one requeue script handles before yielding Redis to other clients.
REQUEUE_CHUNK = 200


class LeaseOps(ReadyOps):
    """``lease``, ``lease_many``, ``get_lease``, ``heartbeat(_many)``, ``complete(_many)``,
    ``release``, ``requeue_expired``, ``wait_for_work`` (QueueStore)."""

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        k = self.keys
        holder = worker_id if holder is None else holder
        self._seen_work.set((stage, self._work.generation(stage)))
        if self.cluster:
            got = await self._lease_across_tasks(stage, worker_id, now, ttl_s, 1, holder)
            return got[0] if got else None
        lease_id = self._new_lease_id()
        out = await self._run(
            "lease",
            [k.queue(stage), k.leases(), k.lease(lease_id)],
            [num(now), num(ttl_s), worker_id, lease_id, stage, holder],
        )
        if not out:
            return None
        return self._handed_out(lease_id, out, stage, worker_id, holder, now)

    async def lease_many(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str | None = None
    ) -> list[Lease]:
        keys = self.keys
        holder = worker_id if holder is None else holder
        self._seen_work.set((stage, self._work.generation(stage)))
        if self.cluster:
            return await self._lease_across_tasks(stage, worker_id, now, ttl_s, k, holder) if k > 0 else []
        ids = [self._new_lease_id() for _ in range(max(0, k))]
        if not ids:
            return []
        rows = await self._run(
            "lease_bundle",
            [keys.queue(stage), keys.leases(), *(keys.lease(i) for i in ids)],
            [num(now), num(ttl_s), worker_id, stage, holder, *ids],
        )
        return [
            self._handed_out(lease_id, row, stage, worker_id, holder, now)
            for lease_id, row in zip(ids, rows, strict=False)
        ]

    async def _lease_across_tasks(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str
    ) -> list[Lease]:
        """Cluster mode: up to ``k`` leases in EBF order across the task queues marked ready in
        ``stage`` (cluster.py, ready.py)."""
        keys = self.keys
        got: list[Lease] = []
        fresh = False
        for rnd in range(LEASE_ROUNDS):
            ready = await self._ready_tasks(stage, fresh)
            heads, empty = await self._heads(stage, sorted(ready))
            if empty:
                await self._prune_ready(stage, {t: ready[t] for t in empty})
            if not heads:
                if fresh:
                    break
                fresh = True  # another process may have registered a task since our copy
                continue
            last_round = rnd == LEASE_ROUNDS - 1
            for i, (_, _, task) in enumerate(heads):
                bound = "" if last_round else bound_of(heads[i + 1] if i + 1 < len(heads) else None)
                slot = keys.slot_of(task)
                ids = [self._new_lease_id(slot) for _ in range(k - len(got))]
                rows = await self._run(
                    "lease_bundle",
                    [keys.queue(stage, task), keys.leases(slot), *(keys.lease(i) for i in ids)],
                    [num(now), num(ttl_s), worker_id, stage, holder, *ids],
                    bound=bound,
                )
                for lease_id, row in zip(ids, rows, strict=False):
                    got.append(self._handed_out(lease_id, row, stage, worker_id, holder, now))
                    self._remember_task(lease_id, task)
                if len(got) >= k:
                    return got
        return got

    async def _heads(self, stage: str, tasks: list[str]) -> tuple[list[tuple[float, str, str]], list[str]]:
        """The head of ``stage``'s queue of each task, earliest first (one pipeline), and the
        tasks whose queue was empty."""
        if not tasks:
            return [], []

        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for t in tasks:
                    p.zrange(self.keys.queue(stage, t), 0, 0, withscores=True)
                return list(await p.execute())

        rows = await self._call(read)
        return order_heads(tasks, rows), [t for t, h in zip(tasks, rows, strict=True) if not h]

    def _remember_task(self, lease_id: str, task: str) -> None:
        self._lease_tasks[lease_id] = task
        while len(self._lease_tasks) > LEASE_CACHE_SIZE:
            self._lease_tasks.popitem(last=False)

    async def _next_queue(self, lease_id: str, next_stage: str | None) -> tuple[str | None, str | None]:
        """The queue a completion moves its request to (None when final) and, in cluster mode,
        the lease's task: remembered when this process handed the lease out, else read from it."""
        if next_stage is None:
            return None, None
        if not self.cluster:
            return self.keys.queue(next_stage), None
        task = self._lease_tasks.pop(lease_id, None)
        if task is None:
            task = await self._call(lambda: self._r.hget(self.keys.lease(lease_id), "task"))
        # an unknown lease has no task: the script refuses it before touching the queue
        return (self.keys.queue(next_stage, task), task) if task else (self.keys.lease(lease_id), None)

    def _new_lease_id(self, slot: int | None = None) -> str:
        # unique across processes (random per-store prefix) without a urandom call per lease; in
        # cluster mode led by the slot of the lease's keys (keys.py)
        lid = f"{self._lease_prefix}{next(self._lease_counter):x}"
        return lid if slot is None else f"{slot:04x}{lid}"

    def _handed_out(
        self, lease_id: str, row: list[Any], stage: str, worker_id: str, holder: str, now: float
    ) -> Lease:
        request_id, task, batch_id, reward_type, payload, artifacts, attempt, deadline = row
        got = Lease(
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
        if not got.artifacts:  # never keep (possibly large) artifacts in process memory
            self._cache_lease(got)
        return got

    def _cache_lease(self, lease: Lease) -> None:
        cache = self._lease_cache
        cache[lease.lease_id] = lease.model_copy()
        while len(cache) > LEASE_CACHE_SIZE:
            cache.popitem(last=False)

    async def get_lease(self, lease_id: str) -> Lease | None:
        """A live lease as it was handed out (None once finished or requeued).

        Leases this object handed out are answered from a small local cache (the proxy reads the
        lease before every completion; this saves that round trip). A lease finished or requeued
        by *another* process may still be answered from the cache; the completion that follows
        is checked by Redis and fails as it must.
        """
        cached = self._lease_cache.get(lease_id)
        if cached is not None:
            return cached.model_copy()
        out = await self._run("get_lease", [self.keys.lease(lease_id)], [])
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

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        seen = self._seen_work.get()
        gen = seen[1] if seen is not None and seen[0] == stage else None
        self._seen_work.set(None)
        await self._work.wait(stage, gen, min(timeout_s, self._wake_poll_s))

    async def heartbeat(self, lease_id: str, holder: str, now: float, ttl_s: float) -> float:
        k = self.keys
        slot = k.lease_slot(lease_id)
        out = await self._run(
            "heartbeat", [k.lease(lease_id), k.leases(slot)], [num(now), num(ttl_s), holder, lease_id]
        )
        deadline = float(out)
        cached = self._lease_cache.get(lease_id)
        if cached is not None:
            cached.deadline = deadline
        return deadline

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
        k = self.keys
        lkey = k.lease(lease_id)
        slot = k.lease_slot(lease_id)
        self._lease_cache.pop(lease_id, None)  # finished (or refused: then Redis knows better)
        qkey, task = await self._next_queue(lease_id, next_stage)
        result_json, status = self._result_args(next_stage, result)
        out = await self._run(
            "complete",
            [
                lkey,
                k.leases(slot),
                qkey or lkey,
                k.unused(slot) if self.cluster else k.events(),
                k.active(slot),
                k.stages(slot),
            ],
            [
                num(now),
                holder,
                lease_id,
                num(run_s),
                outcome,
                next_stage or "",
                orjson.dumps(artifacts).decode() if artifacts is not None else "",
                result_json,
                status,
                self._policy,
                *self._finish_args(),
                k.work_channel(),
                k.result_channel(),
                *k.usage_prefixes(),
            ],
            acked=True,
        )
        if next_stage and task:
            await self._mark_ready([(next_stage, task)])
        return CompleteOutcome(request=self._request_from_hash(pairs(out[1])), batch_completed=bool(out[0]))

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | errors.StoreError]:
        if not lease_ids:
            return []
        groups = by_slot(self.keys.lease_slot(i) for i in lease_ids)
        if len(groups) == 1:
            return await self._heartbeat_slot(lease_ids, holder, now, ttl_s)
        parts = await asyncio.gather(
            *(
                self._heartbeat_slot([lease_ids[i] for i in pos], holder, now, ttl_s)
                for pos in groups.values()
            )
        )
        return _reassemble(len(lease_ids), list(groups.values()), parts)

    async def _heartbeat_slot(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | errors.StoreError]:
        """``heartbeat_many`` of leases in one slot (all of them, standalone)."""
        k = self.keys
        rows = await self._run(
            "heartbeat_bundle",
            [k.leases(k.lease_slot(lease_ids[0])), *(k.lease(i) for i in lease_ids)],
            [num(now), num(ttl_s), holder, *lease_ids],
        )
        out: list[float | errors.StoreError] = []
        for lease_id, row in zip(lease_ids, rows, strict=True):
            if row[0] == "ok":
                deadline = float(row[1])
                cached = self._lease_cache.get(lease_id)
                if cached is not None:
                    cached.deadline = deadline
                out.append(deadline)
            else:
                out.append(self._error(row[1], row[2]))
        return out

    async def complete_many(
        self, items: Sequence[CompletionItem], holder: str, now: float
    ) -> list[CompleteOutcome | errors.StoreError]:
        if not items:
            return []
        groups = by_slot(self.keys.lease_slot(it.lease_id) for it in items)
        if len(groups) == 1:
            return await self._complete_slot(items, holder, now)
        parts = await asyncio.gather(
            *(self._complete_slot([items[i] for i in pos], holder, now) for pos in groups.values())
        )
        return _reassemble(len(items), list(groups.values()), parts)

    async def _complete_slot(
        self, items: Sequence[CompletionItem], holder: str, now: float
    ) -> list[CompleteOutcome | errors.StoreError]:
        """``complete_many`` of leases in one slot (all of them, standalone)."""
        k = self.keys
        slot = k.lease_slot(items[0].lease_id)
        events = k.unused(slot) if self.cluster else k.events()
        keys = [k.leases(slot), events, k.active(slot), k.stages(slot)]
        args: list[Any] = [num(now), holder, self._policy, *self._finish_args()]
        args += [k.work_channel(), k.result_channel(), len(items), *k.usage_prefixes()]
        moved: list[tuple[str, str]] = []  # (next stage, task): marked ready afterwards
        for it in items:
            self._lease_cache.pop(it.lease_id, None)
            lkey = k.lease(it.lease_id)
            qkey, task = await self._next_queue(it.lease_id, it.next_stage)
            keys += [lkey, qkey or lkey]
            if it.next_stage and task:
                moved.append((it.next_stage, task))
            args += [it.lease_id, num(it.run_s), it.outcome, it.next_stage or ""]
            args.append(orjson.dumps(it.artifacts).decode() if it.artifacts is not None else "")
            args += list(self._result_args(it.next_stage, it.result))
        rows = await self._run("complete_bundle", keys, args, acked=True)
        await self._mark_ready(moved)
        out: list[CompleteOutcome | errors.StoreError] = []
        for row in rows:
            if row[0] == "ok":
                out.append(
                    CompleteOutcome(
                        request=self._request_from_hash(pairs(row[2])), batch_completed=bool(row[1])
                    )
                )
            else:
                out.append(self._error(row[1], row[2]))
        return out

    @staticmethod
    def _result_args(next_stage: str | None, result: Result | None) -> tuple[str, str]:
        """The result JSON (without request_id and stages, which the script splices in) and status."""
        final = result or Result(request_id="", status=Status.INTERNAL_ERROR)
        body = final.model_dump_json(exclude={"stages", "request_id"}) if next_stage is None else ""
        return body, final.status.value

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        k = self.keys
        slot = k.lease_slot(lease_id)
        cached = self._lease_cache.pop(lease_id, None)
        task = self._lease_tasks.pop(lease_id, None) or (cached.task if cached is not None else None)
        stage: str = await self._run(
            "release",
            [k.lease(lease_id), k.leases(slot), k.stages(slot)],
            [num(now), holder, lease_id, self._policy, k.work_channel()],
        )
        if task:
            await self._mark_ready([(stage, task)])
        else:
            await self._mark_slot_ready([stage], slot)
        return stage

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        if not self.cluster:
            return await self._requeue_slot(None, now, max_attempts)
        # cluster: the slots of the registered tasks; a script only for those with an expired lease
        k = self.keys
        slots = sorted({s for t in await self._known_tasks(fresh=True) if (s := k.slot_of(t)) is not None})

        async def expired_heads() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for s in slots:
                    p.zrangebyscore(k.leases(s), "-inf", f"({num(now)}", start=0, num=1)
                return list(await p.execute())

        heads = await self._call(expired_heads) if slots else []
        due = [s for s, h in zip(slots, heads, strict=True) if h]
        parts = await asyncio.gather(*(self._requeue_slot(s, now, max_attempts) for s in due))
        for s, part in zip(due, parts, strict=True):  # requeued work: its tasks are ready again
            await self._mark_slot_ready({stage for _, stage in part}, s)
        await self._repair_ready(now)
        return [x for part in parts for x in part]

    async def _requeue_slot(self, slot: int | None, now: float, max_attempts: int) -> list[tuple[str, str]]:
        """``requeue_expired`` of one slot's lease index (the only one, standalone)."""
        k = self.keys
        events = k.unused(slot) if self.cluster else k.events()
        affected: list[tuple[str, str]] = []
        while True:
            out = await self._run(
                "requeue_expired",
                [k.leases(slot), events, k.active(slot), k.stages(slot)],
                [
                    num(now),
                    max_attempts,
                    REQUEUE_CHUNK,
                    self._policy,
                    *self._finish_args(),
                    k.work_channel(),
                    k.result_channel(),
                    *k.usage_prefixes(),
                ],
            )
            affected += list(zip(out[1::3], out[3::3], strict=True))
            for lease_id in out[2::3]:
                self._lease_cache.pop(lease_id, None)
                self._lease_tasks.pop(lease_id, None)
            if int(out[0]) < REQUEUE_CHUNK:
                return affected


def _reassemble(n: int, positions: list[list[int]], parts: Sequence[Sequence[T]]) -> list[T]:
    """Per-slot answers back into the caller's order."""
    out: list[Any] = [None] * n
    for pos, part in zip(positions, parts, strict=True):
        for i, x in zip(pos, part, strict=True):
            out[i] = x
    return out
