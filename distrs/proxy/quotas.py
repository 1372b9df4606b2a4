"""Per-tenant quotas on what a tenant holds in the shared store: requests submitted and not yet
finished, and bytes of kept results (``QueueStore.tenant_usage``).

Checked before anything of a submission is stored, on every submit path (``POST /v1/requests``
and the compat routes): a call that would pass a quota is refused whole with 429
``quota_exceeded`` and ``Retry-After``, so a refusal never loses an acknowledged request and a
retry of the same call is safe. Completions are never refused: a quota only keeps new work out.

The fast check reads the store's counters; only a call they would refuse is checked again on an
exact recount, so a counter left high by a crashed process never blocks a tenant wrongly.
Concurrent calls of one tenant are each checked against the usage before any of them lands, so
together they can pass the queued quota by at most what they carry (one bulk submit each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distrs.config import ProxySettings
from distrs.proxy.errors import ApiError
from distrs.store.base import QueueStore, TenantUsage


@dataclass(frozen=True)
class Limits:
    """A tenant's quotas; 0 = no limit."""

    max_queued: int = 0
    max_result_bytes: int = 0

    @property
    def any(self) -> bool:
        return bool(self.max_queued or self.max_result_bytes)


def limits_for(settings: ProxySettings, tenant: str) -> Limits:
    own = settings.tenant_quotas.get(tenant)
    q = own.max_queued if own is not None and own.max_queued is not None else settings.tenant_max_queued
    b = settings.tenant_max_result_bytes
    if own is not None and own.max_result_bytes is not None:
        b = own.max_result_bytes
    return Limits(q, b)


def refusal(
    tenant: str, limits: Limits, usage: TenantUsage, n: int, now: float, retry_after_s: int
) -> ApiError | None:
    """Why ``n`` more requests of ``tenant`` may not be stored now (None when they may)."""
    if limits.max_queued and n > limits.max_queued:
        return ApiError(
            413,
            "quota_exceeded",
            f"this call carries {n} requests; tenant {tenant!r} may have at most {limits.max_queued} "
            f"unfinished (max_queued): split the call",
            field="max_queued",
            limit=limits.max_queued,
            requested=n,
        )
    if limits.max_queued and usage.queued + n > limits.max_queued:
        return ApiError(
            429,
            "quota_exceeded",
            f"tenant {tenant!r} has {usage.queued} requests unfinished and this call adds up to {n}; "
            f"its quota is {limits.max_queued} (max_queued); retry when some have finished",
            field="max_queued",
            limit=limits.max_queued,
            usage=usage.queued,
            requested=n,
            retry_after_s=retry_after_s,
        )
    if limits.max_result_bytes and usage.result_bytes >= limits.max_result_bytes:
        wait = retry_after_s
        if usage.next_expiry is not None:
            wait = max(1, math.ceil(usage.next_expiry - now))
        return ApiError(
            429,
            "quota_exceeded",
            f"tenant {tenant!r} keeps {usage.result_bytes} bytes of results in the store; its quota "
            f"is {limits.max_result_bytes} (max_result_bytes); retry when older results expire",
            field="max_result_bytes",
            limit=limits.max_result_bytes,
            usage=usage.result_bytes,
            retry_after_s=wait,
        )
    return None


async def check(store: QueueStore, settings: ProxySettings, tenant: str, n: int, now: float) -> None:
    """Raise 429 (or 413) ``quota_exceeded`` when ``n`` more requests of ``tenant`` would pass a
    quota; free when the tenant has none (no store read)."""
    limits = limits_for(settings, tenant)
    if not limits.any:
        return
    retry = settings.quota_retry_after_s
    if refusal(tenant, limits, await store.tenant_usage(tenant, now), n, now, retry) is None:
        return
    exact = await store.tenant_usage(tenant, now, exact=True)
    err = refusal(tenant, limits, exact, n, now, retry)
    if err is not None:
        raise err
