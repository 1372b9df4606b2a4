"""Leases in Redis: taking the heads of a stage queue (one or a bundle), heartbeats, completion,
release and the requeue of expired leases, each one Lua script; plus the wait for work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from distrs.core.model import Lease, Result, Status
from distrs.store import errors
from distrs.store.base import CompleteOutcome, CompletionItem
from distrs.store.redis.base import RedisBase, num, pairs

# Leases handed out by this process remembered for get_lease (oldest forgotten first).
LEASE_CACHE_SIZE = 4096
# The most expired leases one requeue script handles before yielding Redis to other clients.
REQUEUE_CHUNK = 200


class LeaseOps(RedisBase):
    """``lease``, ``lease_many``, ``get_lease``, ``heartbeat(_many)``, ``complete(_many)``,
    ``release``, ``requeue_expired``, ``wait_for_work`` (QueueStore)."""

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        k = self.keys
        holder = worker_id if holder is None else holder
        self._seen_work.set((stage, self._work.generation(stage)))
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

    def _new_lease_id(self) -> str:
        # unique across processes (random per-store prefix) without a urandom call per lease
        return f"{self._lease_prefix}{next(self._lease_counter):x}"

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
        out = await self._run(
            "heartbeat", [k.lease(lease_id), k.leases()], [num(now), num(ttl_s), holder, lease_id]
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
        self._lease_cache.pop(lease_id, None)  # finished (or refused: then Redis knows better)
        result_json, status = self._result_args(next_stage, result)
        out = await self._run(
            "complete",
            [
                lkey,
                k.leases(),
                k.queue(next_stage) if next_stage else lkey,
                k.events(),
                k.active(),
                k.stages(),
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
            ],
        )
        return CompleteOutcome(request=self._request_from_hash(pairs(out[1])), batch_completed=bool(out[0]))

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | errors.StoreError]:
        k = self.keys
        if not lease_ids:
            return []
        rows = await self._run(
            "heartbeat_bundle",
            [k.leases(), *(k.lease(i) for i in lease_ids)],
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
        k = self.keys
        if not items:
            return []
        keys = [k.leases(), k.events(), k.active(), k.stages()]
        args: list[Any] = [num(now), holder, self._policy, *self._finish_args()]
        args += [k.work_channel(), k.result_channel(), len(items)]
        for it in items:
            self._lease_cache.pop(it.lease_id, None)
            lkey = k.lease(it.lease_id)
            keys += [lkey, k.queue(it.next_stage) if it.next_stage else lkey]
            args += [it.lease_id, num(it.run_s), it.outcome, it.next_stage or ""]
            args.append(orjson.dumps(it.artifacts).decode() if it.artifacts is not None else "")
            args += list(self._result_args(it.next_stage, it.result))
        rows = await self._run("complete_bundle", keys, args)
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
        self._lease_cache.pop(lease_id, None)
        return await self._run(
            "release",
            [k.lease(lease_id), k.leases(), k.stages()],
            [num(now), holder, lease_id, self._policy, k.work_channel()],
        )

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        k = self.keys
        affected: list[tuple[str, str]] = []
        while True:
            out = await self._run(
                "requeue_expired",
                [k.leases(), k.events(), k.active(), k.stages()],
                [
                    num(now),
                    max_attempts,
                    REQUEUE_CHUNK,
                    self._policy,
                    *self._finish_args(),
                    k.work_channel(),
                    k.result_channel(),
                ],
            )
            affected += list(zip(out[1::3], out[3::3], strict=True))
            for lease_id in out[2::3]:
                self._lease_cache.pop(lease_id, None)
            if int(out[0]) < REQUEUE_CHUNK:
                return affected
