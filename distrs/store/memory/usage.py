"""Per-tenant usage in memory: counted from the batch records themselves, so always exact and
nothing is ever left for the usage step to count."""

from __future__ import annotations

from distrs.store.base import TenantUsage
from distrs.store.memory.state import MemoryState
from distrs.store.usage_deltas import UsageDeltas


class MemoryUsage:
    """``UsagePart`` (store/composed.py) over ``MemoryState``."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    async def count(self, deltas: UsageDeltas) -> None:
        return None  # the transitions never leave any (module docstring)

    async def tenant_usage(self, tenant: str, now: float, exact: bool) -> TenantUsage:
        s = self.s
        s.prune(now)
        out = TenantUsage()
        for key, b in s.batches.items():
            if b.tenant != tenant:
                continue
            out.queued += b.submitted - b.done
            if s.result_bytes.get(key):
                out.result_bytes += s.result_bytes[key]
                if b.completed_at is not None:
                    expiry = b.completed_at + s.result_ttl_s
                    out.next_expiry = expiry if out.next_expiry is None else min(out.next_expiry, expiry)
        return out
