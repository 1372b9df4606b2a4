"""Per-tenant usage in Redis: requests not yet finished and bytes of kept results, the figures
the proxy's quotas are checked against.

The counters move with every change of what a tenant uses: a submission: + its accepted
requests; a final result, from a completion, a bundle or an expiry past ``max_attempts``: - 1
and + its bytes (the length of the Result's JSON as ``Result.model_dump_json`` writes it,
measured by the script as pydantic would write it, ``lua/lib.lua``); a batch completing: its
queued entry goes and its results' expiry is set. Every figure is kept per batch, so whatever a
batch left behind leaves with it, and as a per-tenant total, so the check on every submission
reads two numbers (plus the batches whose results expired since the last read), however many
batches the tenant keeps.

Standalone (and Sentinel) mode: every key shares the ``{ns}`` tag, so the Lua script of the
transition moves the counters itself, in the same atomic step (``usage_submitted``,
``usage_flush``). The counters cannot drift from the batch records, and no command or round trip
is added; the transition leaves nothing for the store's usage step (``count``).

Cluster mode: the counters live under the tenant's own hash tag (``ClusterKeys.usage_*``),
another slot than the task's, so no script can touch them: the script hands back what it
counted, and the store's usage step writes it right after, summed over an event-loop tick
(``store/usage_deltas.py``). A process that dies between a script and its counter update leaves
a counter off by that change.

In both modes ``tenant_usage(exact=True)`` recounts from the batch records the scripts keep
atomically (``submitted - done`` of each counted batch, its ``completed_at``) and repairs the
counters (a counter write a standalone script could not make, on a key of the wrong type, is
skipped, not raised), and the proxy refuses a submission only on such an exact count: a stale
counter can let a tenant past its quota by what was lost, never block it wrongly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from distrs.store.base import TenantUsage
from distrs.store.errors import StoreError
from distrs.store.redis.records import num
from distrs.store.redis.topology import Topology
from distrs.store.usage_deltas import DeltaCoalescer, UsageDeltas

_INF = "+inf"
log = logging.getLogger(__name__)


class RedisUsage:
    """``UsagePart`` (store/composed.py) over a ``Topology``."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._coalescer: DeltaCoalescer | None = None  # made on first use, in the store's loop

    async def count(self, deltas: UsageDeltas) -> None:
        """What a transition handed back, sent with the counts of the other calls of this tick
        (``usage_deltas.py``); a failure is logged, never raised (``_count``)."""
        if self._coalescer is None:
            self._coalescer = DeltaCoalescer(self._send_usage)
        await self._coalescer.add(deltas)

    async def _count(self, update: Callable[[], Awaitable[None]]) -> None:
        """Apply a counter update after a state change that already succeeded: a failure here is
        logged, never raised, so the caller still learns that its submission or completion
        landed (a raised error would make it retry what is done); the counter stays off until
        the next exact count (module docstring)."""
        try:
            await self.topology.call(update)
        except StoreError as exc:
            log.warning("usage counters not updated (%s); the next exact count repairs them", exc)

    async def _send_usage(self, deltas: UsageDeltas) -> None:
        """One pipeline of the counter updates of ``deltas``: submissions first, then final
        results (logged, never raised: ``_count``)."""
        topo = self.topology
        k = topo.keys

        async def count() -> None:
            async with topo.client.pipeline(transaction=False) as p:
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

    async def tenant_usage(self, tenant: str, now: float, exact: bool) -> TenantUsage:
        topo = self.topology
        k = topo.keys
        ke = k.usage_expiry(tenant)
        gone = await topo.call(lambda: topo.client.zrangebyscore(ke, "-inf", f"({num(now)}"))
        if gone:
            await self._expire(tenant, gone)
        if exact:
            return await self._recount(tenant, now)

        async def read() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                p.hmget(k.usage_totals(tenant), "queued", "bytes")
                p.zrangebyscore(ke, f"{num(now)}", "(+inf", start=0, num=1, withscores=True)
                return list(await p.execute())

        (queued, size), first = await topo.call(read)
        return TenantUsage(
            queued=max(0, int(queued or 0)),
            result_bytes=max(0, int(size or 0)),
            next_expiry=float(first[0][1]) if first else None,
        )

    async def _expire(self, tenant: str, bkeys: Sequence[str]) -> None:
        """Take expired (or vanished) batches out of the tenant's usage. The ZREM claims each
        batch, so of several processes pruning at once only one takes its bytes off the total."""
        topo = self.topology
        k = topo.keys
        ke, kb, kq = k.usage_expiry(tenant), k.usage_bytes(tenant), k.usage_queued(tenant)

        async def claim() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                for bkey in bkeys:
                    p.zrem(ke, bkey)
                    p.hget(kb, bkey)
                return list(await p.execute())

        got = await topo.call(claim)
        freed = sum(int(v or 0) for won, v in zip(got[0::2], got[1::2], strict=True) if won)

        async def drop() -> None:
            async with topo.client.pipeline(transaction=False) as p:
                p.hdel(kb, *bkeys)
                p.hdel(kq, *bkeys)
                if freed:
                    p.hincrby(k.usage_totals(tenant), "bytes", -freed)
                await p.execute()

        await topo.call(drop)

    async def _recount(self, tenant: str, now: float) -> TenantUsage:
        """The tenant's usage counted from its batch records, repairing the counters on the way:
        each counted batch's queued entry becomes ``submitted - done`` (removed once complete), an
        open expiry gets the batch's ``completed_at + result_ttl_s``, entries of batches that are
        gone are dropped, and the totals are rewritten. Costs a read of every batch the tenant has
        results of (only calls the counters would refuse come here, ``proxy/quotas.py``)."""
        topo = self.topology
        k = topo.keys
        kq, kb, ke = k.usage_queued(tenant), k.usage_bytes(tenant), k.usage_expiry(tenant)

        async def members() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                p.hkeys(kq)
                p.zrangebyscore(ke, _INF, _INF)
                return list(await p.execute())

        counted, open_expiry = await topo.call(members)
        bkeys = sorted(set(counted) | set(open_expiry))

        async def read() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                for bkey in bkeys:
                    p.hmget(bkey, "submitted", "done", "completed_at")
                return list(await p.execute())

        rows = await topo.call(read) if bkeys else []
        gone = [b for b, (sub, _, _) in zip(bkeys, rows, strict=True) if sub is None]
        if gone:
            await self._expire(tenant, gone)
        in_expiry = set(open_expiry)
        queued = 0

        async def repair() -> None:
            nonlocal queued
            async with topo.client.pipeline(transaction=False) as p:
                for bkey, (sub, done, completed_at) in zip(bkeys, rows, strict=True):
                    if sub is None:
                        continue
                    if completed_at:
                        p.hdel(kq, bkey)
                        if bkey in in_expiry:
                            p.zadd(ke, {bkey: float(completed_at) + topo.settings.result_ttl_s})
                    else:
                        n = max(0, int(sub) - int(done or 0))
                        queued += n
                        p.hset(kq, bkey, n)
                await p.execute()

        await topo.call(repair)

        async def sizes() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                p.hvals(kb)
                p.zrangebyscore(ke, f"{num(now)}", "(+inf", start=0, num=1, withscores=True)
                return list(await p.execute())

        values, first = await topo.call(sizes)
        size = sum(int(v) for v in values)
        await topo.call(
            lambda: topo.client.hset(k.usage_totals(tenant), mapping={"queued": queued, "bytes": size})
        )
        return TenantUsage(
            queued=queued, result_bytes=max(0, size), next_expiry=float(first[0][1]) if first else None
        )
