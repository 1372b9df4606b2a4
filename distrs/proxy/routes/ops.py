"""Operations: health, readiness, Prometheus metrics and a JSON stats view.

``/metrics`` is open unless ``metrics_auth`` (then a token with role ``metrics`` or ``admin``);
its task labels name no tenant unless ``metrics_tenant_labels`` (``distrs.metrics``).
``/v1/stats`` is admin-only and shows every tenant's batches with their tenant, and each known
tenant's store usage against its quotas; ``/v1/usage`` shows a trainer its own.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from distrs.proxy import quotas
from distrs.proxy.auth import Principal, Role, public_task
from distrs.proxy.deps import AppState, admin, authorize, get_state, trainer
from distrs.proxy.responses import JSONResponse

router = APIRouter(tags=["ops"])
WORKER_STALE_S = 120.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(st: AppState = Depends(get_state)) -> JSONResponse:
    try:
        ok = await st.store.ping()
    except Exception as exc:  # any store failure means not ready
        return JSONResponse({"status": "unavailable", "store": str(exc)}, status_code=503)
    return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)


async def refresh_gauges(st: AppState) -> dict[str, Any]:
    """Set the queue-depth and lease gauges from a store snapshot; returns the snapshot as JSON."""
    snap = await st.store.snapshot(st.clock())
    m = st.metrics
    m.queue_depth.clear()
    for b in snap.batches:
        for stage, n in b.queued.items():
            m.queue_depth.labels(stage, b.batch.task).inc(n)
    for stage in st.table.stages:
        m.leases_in_flight.labels(stage).set(snap.running.get(stage, 0))
    if m.tenant_labels:  # never without: the tenant label would name tenants on an open scrape
        m.tenant_queued.clear()
        m.tenant_result_bytes.clear()
        for tenant in known_tenants(st):
            u = await st.store.tenant_usage(tenant, snap.now)
            m.tenant_queued.labels(tenant).set(u.queued)
            m.tenant_result_bytes.labels(tenant).set(u.result_bytes)
    return snap.model_dump(mode="json")


def known_tenants(st: AppState) -> list[str]:
    """The tenants of the token table and of the per-tenant quotas."""
    return sorted(set(st.tokens.tenants()) | set(st.settings.tenant_quotas))


async def usage_view(st: AppState, tenant: str, now: float) -> dict[str, Any]:
    u = await st.store.tenant_usage(tenant, now)
    lim = quotas.limits_for(st.settings, tenant)
    return {
        "queued": u.queued,
        "result_bytes": u.result_bytes,
        "next_expiry": u.next_expiry,
        "limits": {"max_queued": lim.max_queued, "max_result_bytes": lim.max_result_bytes},
    }


@router.get("/metrics")
async def metrics(request: Request, st: AppState = Depends(get_state)) -> Response:
    if st.settings.metrics_auth:
        authorize(request, Role.METRICS)
    await refresh_gauges(st)
    return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/stats")
async def stats(_: Principal = Depends(admin), st: AppState = Depends(get_state)) -> dict[str, Any]:
    snap = await refresh_gauges(st)
    now = st.clock()
    workers: dict[str, int] = {}
    for _wid, (stage, seen) in list(st.workers.items()):
        if now - seen <= WORKER_STALE_S:
            workers[stage] = workers.get(stage, 0) + 1
    return {
        "now": now,
        "queues": snap["queue_depth"],
        "running": snap["running"],
        "workers": workers,
        "active_batches": [
            {k: b["batch"][k] for k in ("batch_id", "size", "submitted", "done", "estimated_completion")}
            | {"tenant": b["batch"]["tenant"], "task": public_task(b["batch"]["task"]), "queued": b["queued"]}
            for b in snap["batches"]
        ],
        "last_plan": st.plan_view() if st.plan_view else None,
        "tenants": {t: await usage_view(st, t, now) for t in known_tenants(st)},
    }


@router.get("/v1/usage")
async def usage(who: Principal = Depends(trainer), st: AppState = Depends(get_state)) -> dict[str, Any]:
    """The caller's tenant's store usage and quotas (0 = no limit); an admin names one with
    ``?tenant=``."""
    return {"tenant": who.tenant} | await usage_view(st, who.tenant, st.clock())
