"""Worker-facing routes: lease (long-poll), heartbeat, complete.

A lease long-poll parks on the store's wake-up for its stage; it never spins. Completing moves the
request to its next stage (with artifacts, size-capped) or records its final result; the metrics
for run time, queue time, final status and batch extra delay are recorded here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Response

from distrs.core.model import Result
from distrs.proxy.auth import Principal
from distrs.proxy.deps import AppState, get_state, worker
from distrs.proxy.errors import ApiError
from distrs.proxy.responses import JSONResponse
from distrs.proxy.schemas import CompleteRequest, HeartbeatRequest, LeaseRequest
from distrs.rewards.routing import next_stage

router = APIRouter(prefix="/v1/leases", tags=["worker"])


@router.post("", responses={204: {"description": "nothing to do within wait_s"}})
async def lease(
    body: LeaseRequest, _: Principal = Depends(worker), st: AppState = Depends(get_state)
) -> Response:
    if body.stage not in st.table.stages:
        raise ApiError(
            422,
            "unknown_stage",
            f"stage: unknown stage {body.stage!r}; known: {', '.join(st.table.stages)}",
            field="stage",
        )
    st.workers[body.worker_id] = (body.stage, st.clock())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(body.wait_s, st.settings.max_wait_s)
    while True:
        got = await st.store.lease(body.stage, body.worker_id, st.clock(), st.settings.lease_ttl_s)
        if got is not None:
            return JSONResponse(got.model_dump(mode="json"))
        left = deadline - loop.time()
        if left <= 0:
            return Response(status_code=204)
        await st.store.wait_for_work(body.stage, min(left, 5.0))


@router.post("/{lease_id}/heartbeat")
async def heartbeat(
    lease_id: str, body: HeartbeatRequest, _: Principal = Depends(worker), st: AppState = Depends(get_state)
) -> dict[str, Any]:
    deadline = await st.store.heartbeat(lease_id, body.worker_id, st.clock(), st.settings.lease_ttl_s)
    return {"lease_id": lease_id, "deadline": deadline}


@router.post("/{lease_id}/complete")
async def complete(
    lease_id: str, body: CompleteRequest, _: Principal = Depends(worker), st: AppState = Depends(get_state)
) -> dict[str, Any]:
    art_size = sum(len(k) + len(v) for k, v in (body.artifacts or {}).items())
    if art_size > st.settings.max_artifact_bytes:
        raise ApiError(
            413,
            "artifacts_too_large",
            f"artifacts: {art_size} bytes; the limit is {st.settings.max_artifact_bytes}",
            field="artifacts",
        )
    now = st.clock()
    nxt: str | None = None
    result: Result | None = None
    if body.outcome == "next":
        lease_stage, reward_type, payload = await _lease_facts(st, lease_id)
        nxt = next_stage(st.table, reward_type, payload, lease_stage)
        if nxt is None:
            raise ApiError(
                422,
                "no_next_stage",
                f"outcome: 'next' at {lease_stage!r}, the last stage of this request",
                field="outcome",
            )
    else:
        if body.result is None:
            raise ApiError(422, "invalid_request", "result: required when outcome is 'final'", field="result")
        result = Result(
            request_id="", status=body.result.status, score=body.result.score, detail=body.result.detail
        )
    out = await st.store.complete(
        lease_id, body.worker_id, now, body.run_s, nxt, body.artifacts, result, body.outcome
    )
    m = st.metrics
    last = out.request.stages[-1]
    m.stage_run_seconds.labels(last.name).observe(last.run_s)
    m.stage_queue_seconds.labels(last.name).observe(last.queued_s)
    m.worker_seconds_busy.labels(last.name).inc(last.run_s)
    if out.request.result is not None:
        m.requests_finished.labels(out.request.reward_type, out.request.result.status.value).inc()
    if out.batch_completed:
        b = await st.store.get_batch(out.request.task, out.request.batch_id)
        if b is not None and b.extra_delay_s is not None:
            m.batch_extra_delay.labels(b.task).observe(b.extra_delay_s)
            if b.completed_at is not None:
                m.batch_actual_span.labels(b.task).set(b.completed_at - b.anchor)
            if b.estimated_completion is not None:
                m.batch_estimated_span.labels(b.task).set(b.estimated_completion - b.anchor)
    return {
        "lease_id": lease_id,
        "request_id": out.request.request_id,
        "next_stage": nxt,
        "batch_completed": out.batch_completed,
    }


async def _lease_facts(st: AppState, lease_id: str) -> tuple[str, str, dict[str, Any]]:
    lease = await st.store.get_lease(lease_id)
    if lease is None:
        raise ApiError(
            404, "unknown_lease", f"lease {lease_id!r} is unknown or already finished", field="lease_id"
        )
    return lease.stage, lease.reward_type, lease.payload
