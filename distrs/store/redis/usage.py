"""Per-tenant usage in Redis: requests not yet finished and bytes of kept results, the figures
the proxy's quotas are checked against.

The counters move with every change of what a tenant uses: a submission: + its accepted
requests; a final result, from a completion, a bundle or an expiry past ``max_attempts``: - 1
and + its bytes (the length of the Result's JSON as ``Result.model_dump_json`` writes it); a
batch completing: its queued entry goes and its results' expiry is set. Every figure is kept per
batch, so whatever a batch left behind leaves with it, and as a per-tenant total, so the check
on every submission reads two numbers (plus the batches whose results expired since the last
read), however many batches the tenant keeps.

Standalone (and Sentinel) mode: every key shares the ``{ns}`` tag, so the Lua script of the
transition moves the counters itself, in the same atomic step (``lua/lib.lua``,
``usage_submitted``/``usage_finished``; the result size is measured there as pydantic would write
it). The counters cannot drift from the batch records, and no command or round trip is added.

Cluster mode: the counters live under the tenant's own hash tag (``keys.usage_*``), another
slot than the task's, so no script can touch them: the store's Python code updates them right
after the script that changed the state succeeded, summed over an event-loop tick
(``usage_batch.py``). A process that dies between a script and its counter update leaves a counter
off by that change.

In both modes ``tenant_usage(exact=True)`` recounts from the batch records the scripts keep
atomically (``submitted - done`` of each counted batch, its ``completed_at``) and repairs the
counters (a counter write a standalone script could not make, on a key of the wrong type, is
skipped, not raised), and the proxy refuses a submission only on such an exact count: a stale
counter can let a tenant past its quota by what was lost, never block it wrongly.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from distrs.core.model import RequestRecord, RequestState, Result
from distrs.store.base import CompleteOutcome, CompletionItem, NewRequest, SubmitOutcome, TenantUsage
from distrs.store.errors import StoreError
from distrs.store.redis.base import RedisBase, num
from distrs.store.redis.batches import BatchOps
from distrs.store.redis.leases import LeaseOps
from distrs.store.redis.usage_batch import DeltaBatcher, UsageDeltas

_INF = "+inf"
log = logging.getLogger(__name__)


class UsageOps(BatchOps, LeaseOps, RedisBase):
    """``tenant_usage`` (QueueStore), and in cluster mode the counter updates around submit,
    complete(_many) and requeue_expired (their state changes are the other mixins'; standalone,
    their scripts update the counters themselves)."""

    _usage_batcher: DeltaBatcher | None = None  # made on first use, in the store's loop

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        out = await super().submit(requests, now)
        if out.accepted and self.cluster:
            try:
                taken = await self._accepted(requests, out, now)
            except StoreError as exc:  # the submission landed: report it regardless
                log.warning("usage counters not updated (%s); the next exact count repairs them", exc)
                return out
            deltas = UsageDeltas()
            for r in taken:
                deltas.submit(r.tenant, self.keys.batch(r.task, r.batch_id), 1)
            if deltas.submitted:
                await self._send_deltas(deltas)
        return out

    async def _accepted(self, requests: list[NewRequest], out: SubmitOutcome, now: float) -> list[NewRequest]:
        """The requests of a call that were stored. The outcome names ids only: an id given once
        (per task) is plain; one that several tasks of the call share and that was accepted only
        for some of them is told by its record's ``arrived_at`` (this call's ``now``)."""
        accepted = Counter(out.accepted)
        firsts: dict[tuple[str, str], NewRequest] = {}
        for r in requests:
            firsts.setdefault((r.task, r.request_id), r)
        by_id: dict[str, list[NewRequest]] = {}
        for r in firsts.values():
            by_id.setdefault(r.request_id, []).append(r)
        taken: list[NewRequest] = []
        unsure: list[NewRequest] = []
        for rid, group in by_id.items():
            if accepted[rid] >= len(group):
                taken += group
            elif accepted[rid] > 0:
                unsure += group
        if unsure:
            keys = [self.keys.request(r.task, r.request_id) for r in unsure]

            async def read() -> list[Any]:
                async with self._r.pipeline(transaction=False) as p:
                    for rk in keys:
                        p.hget(rk, "arrived_at")
                    return list(await p.execute())

            arrived = await self._call(read)
            taken += [r for r, at in zip(unsure, arrived, strict=True) if at is not None and float(at) == now]
        return taken

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
        out = await super().complete(lease_id, holder, now, run_s, next_stage, artifacts, result, outcome)
        if self.cluster:
            await self._count_finished([(out.request, out.batch_completed)], now)
        return out

    async def complete_many(
        self, items: Sequence[CompletionItem], holder: str, now: float
    ) -> list[CompleteOutcome | StoreError]:
        outs = await super().complete_many(items, holder, now)
        if not self.cluster:
            return outs
        await self._count_finished(
            [(o.request, o.batch_completed) for o in outs if isinstance(o, CompleteOutcome)], now
        )
        return outs

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        if not self.cluster:
            return await super().requeue_expired(now, max_attempts)
        # Which expired leases end their request (attempts >= max_attempts) is read before the
        # requeue; the script reports which leases it handled, and only those count.
        try:
            ending = await self._expiring_finals(now, max_attempts)
        except StoreError as exc:  # the sweep itself must not wait on the counters
            log.warning(
                "usage counters: expired leases not read (%s); the next exact count repairs them", exc
            )
            ending = []
        out = await super().requeue_expired(now, max_attempts)
        handled = {rid for rid, _ in out}
        reqkeys = [rk for rid, rk in ending if rid in handled]
        if reqkeys:
            try:
                await self._count_ended(reqkeys, now)
            except StoreError as exc:  # the requeue landed: report it regardless
                log.warning("usage counters not updated (%s); the next exact count repairs them", exc)
        return out

    async def _count_ended(self, reqkeys: list[str], now: float) -> None:
        """Count the requests the reaper just ended (read back from their records)."""

        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for rk in reqkeys:
                    p.hgetall(rk)
                return list(await p.execute())

        rows = await self._call(read)
        recs = [self._request_from_hash(h) for h in rows if h]
        done = [r for r in recs if r.state is RequestState.DONE]
        completed = await self._completed_batches(done)
        await self._count_finished(
            [(r, (r.task, r.batch_id) in completed) for r in done], now, known_completion=completed
        )

    async def _count(self, update: Callable[[], Awaitable[None]]) -> None:
        """Apply a counter update after a state change that already succeeded: a failure here is
        logged, never raised, so the caller still learns that its submission or completion
        landed (a raised error would make it retry what is done); the counter stays off until
        the next exact count (module docstring)."""
        try:
            await self._call(update)
        except StoreError as exc:
            log.warning("usage counters not updated (%s); the next exact count repairs them", exc)

    async def _expiring_finals(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        """(request id, request key) of each expired lease whose requeue will end its request
        (cluster mode)."""
        k = self.keys
        slots = sorted({s for t in await self._known_tasks() if (s := k.slot_of(t)) is not None})
        index_keys = [k.leases(s) for s in slots]

        async def read() -> list[tuple[str, str]]:
            async with self._r.pipeline(transaction=False) as p:
                for ik in index_keys:
                    p.zrangebyscore(ik, "-inf", f"({num(now)}")
                lkeys = [lk for rows in await p.execute() for lk in rows]
            if not lkeys:
                return []
            async with self._r.pipeline(transaction=False) as p:
                for lk in lkeys:
                    p.hmget(lk, "k_req", "request_id")
                leases = await p.execute()
            live = [(lk, rk, rid) for lk, (rk, rid) in zip(lkeys, leases, strict=True) if rk]
            async with self._r.pipeline(transaction=False) as p:
                for _, rk, _ in live:
                    p.hmget(rk, "state", "lease", "attempts")
                reqs = await p.execute()
            return [
                (rid, rk)
                for (lk, rk, rid), (state, lease, attempts) in zip(live, reqs, strict=True)
                if state == "running" and lease == lk and int(attempts or 0) >= max_attempts
            ]

        return await self._call(read)

    async def _completed_batches(self, recs: Iterable[RequestRecord]) -> dict[tuple[str, str], float]:
        """(task, batch id) -> completed_at of those of ``recs``' batches that are complete."""
        pairs = sorted({(r.task, r.batch_id) for r in recs})
        if not pairs:
            return {}

        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for task, batch_id in pairs:
                    p.hget(self.keys.batch(task, batch_id), "completed_at")
                return list(await p.execute())

        got = await self._call(read)
        return {pair: float(v) for pair, v in zip(pairs, got, strict=True) if v}

    async def _count_finished(
        self,
        finished: Sequence[tuple[RequestRecord, bool]],
        now: float,
        known_completion: dict[tuple[str, str], float] | None = None,
    ) -> None:
        """Count the final results among ``finished`` (request, its batch completed with it)."""
        rows = [(r, c) for r, c in finished if r.state is RequestState.DONE and r.result is not None]
        if not rows:
            return
        k, ttl = self.keys, self.settings.result_ttl_s
        known = known_completion or {}
        # summed per batch and per tenant, over every completion of this tick (usage_batch.py)
        deltas = UsageDeltas()
        for rec, completed in rows:
            assert rec.result is not None
            size = len(rec.result.model_dump_json())
            expiry = known.get((rec.task, rec.batch_id), now) + ttl if completed else None
            deltas.add(rec.tenant, k.batch(rec.task, rec.batch_id), 1, size, expiry)
        await self._send_deltas(deltas)

    async def _send_deltas(self, deltas: UsageDeltas) -> None:
        """``deltas`` sent with those of the other calls of this tick (usage_batch.py)."""
        if self._usage_batcher is None:
            self._usage_batcher = DeltaBatcher(self._send_usage)
        await self._usage_batcher.add(deltas)

    async def _send_usage(self, deltas: UsageDeltas) -> None:
        """One pipeline of the counter updates of ``deltas``: submissions first, then final
        results (logged, never raised: ``_count``)."""
        k = self.keys

        async def count() -> None:
            async with self._r.pipeline(transaction=False) as p:
                for (tenant, bkey), n in deltas.submitted.items():
                    p.hincrby(k.usage_queued(tenant), bkey, n)
                for tenant, n in deltas.tenants_submitted.items():
                    p.hincrby(k.usage_totals(tenant), "queued", n)
                for (tenant, bkey), b in deltas.batches.items():
                    p.hincrby(k.usage_bytes(tenant), bkey, b.size)
                    if b.expiry is not None:
                        p.hdel(k.usage_queued(tenant), bkey)
                        p.zadd(k.usage_expiry(tenant), {bkey: b.expiry})
                    else:
                        p.hincrby(k.usage_queued(tenant), bkey, -b.n)
                        p.zadd(k.usage_expiry(tenant), {bkey: math.inf}, nx=True)
                for tenant, (n, size) in deltas.tenants.items():
                    p.hincrby(k.usage_totals(tenant), "queued", -n)
                    p.hincrby(k.usage_totals(tenant), "bytes", size)
                await p.execute()

        await self._count(count)

    async def tenant_usage(self, tenant: str, now: float, exact: bool = False) -> TenantUsage:
        k = self.keys
        ke = k.usage_expiry(tenant)
        gone = await self._call(lambda: self._r.zrangebyscore(ke, "-inf", f"({num(now)}"))
        if gone:
            await self._expire(tenant, gone)
        if exact:
            return await self._recount(tenant, now)

        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                p.hmget(k.usage_totals(tenant), "queued", "bytes")
                p.zrangebyscore(ke, f"{num(now)}", "(+inf", start=0, num=1, withscores=True)
                return list(await p.execute())

        (queued, size), first = await self._call(read)
        return TenantUsage(
            queued=max(0, int(queued or 0)),
            result_bytes=max(0, int(size or 0)),
            next_expiry=float(first[0][1]) if first else None,
        )

    async def _expire(self, tenant: str, bkeys: Sequence[str]) -> None:
        """Take expired (or vanished) batches out of the tenant's usage. The ZREM claims each
        batch, so of several processes pruning at once only one takes its bytes off the total."""
        k = self.keys
        ke, kb, kq = k.usage_expiry(tenant), k.usage_bytes(tenant), k.usage_queued(tenant)

        async def claim() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for bkey in bkeys:
                    p.zrem(ke, bkey)
                    p.hget(kb, bkey)
                return list(await p.execute())

        got = await self._call(claim)
        freed = sum(int(v or 0) for won, v in zip(got[0::2], got[1::2], strict=True) if won)

        async def drop() -> None:
            async with self._r.pipeline(transaction=False) as p:
                p.hdel(kb, *bkeys)
                p.hdel(kq, *bkeys)
                if freed:
                    p.hincrby(k.usage_totals(tenant), "bytes", -freed)
                await p.execute()

        await self._call(drop)

    async def _recount(self, tenant: str, now: float) -> TenantUsage:
        """The tenant's usage counted from its batch records, repairing the counters on the way:
        each counted batch's queued entry becomes ``submitted - done`` (removed once complete), an
        open expiry gets the batch's ``completed_at + result_ttl_s``, entries of batches that are
        gone are dropped, and the totals are rewritten. Costs a read of every batch the tenant has
        results of (only calls the counters would refuse come here, ``proxy/quotas.py``)."""
        k = self.keys
        kq, kb, ke = k.usage_queued(tenant), k.usage_bytes(tenant), k.usage_expiry(tenant)

        async def members() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                p.hkeys(kq)
                p.zrangebyscore(ke, _INF, _INF)
                return list(await p.execute())

        counted, open_expiry = await self._call(members)
        bkeys = sorted(set(counted) | set(open_expiry))

        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                for bkey in bkeys:
                    p.hmget(bkey, "submitted", "done", "completed_at")
                return list(await p.execute())

        rows = await self._call(read) if bkeys else []
        gone = [b for b, (sub, _, _) in zip(bkeys, rows, strict=True) if sub is None]
        if gone:
            await self._expire(tenant, gone)
        in_expiry = set(open_expiry)
        queued = 0

        async def repair() -> None:
            nonlocal queued
            async with self._r.pipeline(transaction=False) as p:
                for bkey, (sub, done, completed_at) in zip(bkeys, rows, strict=True):
                    if sub is None:
                        continue
                    if completed_at:
                        p.hdel(kq, bkey)
                        if bkey in in_expiry:
                            p.zadd(ke, {bkey: float(completed_at) + self.settings.result_ttl_s})
                    else:
                        n = max(0, int(sub) - int(done or 0))
                        queued += n
                        p.hset(kq, bkey, n)
                await p.execute()

        await self._call(repair)

        async def sizes() -> list[Any]:
            async with self._r.pipeline(transaction=False) as p:
                p.hvals(kb)
                p.zrangebyscore(ke, f"{num(now)}", "(+inf", start=0, num=1, withscores=True)
                return list(await p.execute())

        values, first = await self._call(sizes)
        size = sum(int(v) for v in values)
        await self._call(
            lambda: self._r.hset(k.usage_totals(tenant), mapping={"queued": queued, "bytes": size})
        )
        return TenantUsage(
            queued=queued, result_bytes=max(0, size), next_expiry=float(first[0][1]) if first else None
        )
