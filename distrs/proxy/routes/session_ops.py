"""Worker-facing session routes: long-poll for calls, report them (docs/sessions.md).

A session worker's poll is also its heartbeat: the store records it as alive with its room
(``capacity``, ``open``) and whether it is draining, and hands it the calls of the sessions it
holds, then creates while it has room. A worker whose polls stop for ``worker_ttl_s`` is gone and
its sessions end ``session_lost``. Calls belong to the credential that polled for them (as
leases do, ``routes/worker.py``): a report from any other is refused per call.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from distrs.core.sessions import EndReason, WorkerView
from distrs.proxy import body as json_body
from distrs.proxy.auth import Role
from distrs.proxy.deps import authorize, bound_worker
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes.worker import holder_of
from distrs.proxy.session_schemas import CompleteIn, PollIn, ReleaseIn
from distrs.proxy.sessions import sessions_of
from distrs.store.sessions.base import OpDone

router = APIRouter(prefix="/v1/session-ops", tags=["worker"], default_response_class=JSONResponse)


@router.post(
    "/poll",
    responses={204: {"description": "no call within wait_s"}},
    openapi_extra=json_body.body_doc(PollIn),
)
async def poll(request: Request) -> Response:
    """Long-poll for calls: 200 ``{ops, heartbeat_s}`` with at least one, or 204 after ``wait_s``."""
    st, who = authorize(request, Role.WORKER)
    svc = sessions_of(request)
    body = await json_body.read(request, PollIn)
    bound_worker(who, body.worker_id)
    holder = holder_of(request, st, who)
    s = svc.settings
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(body.wait_s, st.settings.max_wait_s)
    while True:
        now = svc.clock()
        view = WorkerView(
            worker_id=body.worker_id,
            holder=holder,
            capacity=body.capacity,
            open=body.open,
            spares=body.spares,
            draining=body.draining,
            seen_at=now,
        )
        ops = await svc.store.poll(view, now, body.max_ops, s.op_grace_s)
        if ops:
            payload = [op.model_dump(mode="json", exclude={"holder"}) for op in ops]
            return JSONResponse({"ops": payload, "heartbeat_s": s.worker_ttl_s / 3})
        left = deadline - loop.time()
        if left <= 0:
            return Response(status_code=204)
        # at most a third of the TTL between polls: the poll is the worker's liveness beat
        await svc.store.wait_for_ops(body.worker_id, min(left, s.worker_ttl_s / 3))


@router.post("/complete", openapi_extra=json_body.body_doc(CompleteIn))
async def complete(request: Request) -> JSONResponse:
    """Report calls: per call the store's answer (``error`` when refused, ``close`` when the worker
    should end the session)."""
    st, who = authorize(request, Role.WORKER)
    svc = sessions_of(request)
    body = await json_body.read(request, CompleteIn)
    bound_worker(who, body.worker_id)
    items = [OpDone(op_id=i.op_id, result=i.result, error=i.error, session=i.session) for i in body.items]
    answers = await svc.store.complete(holder_of(request, st, who), items, svc.clock())
    for item, answer in zip(items, answers, strict=True):
        ended = str(item.session.get("ended") or "")
        if answer.error is None and ended in EndReason._value2member_map_:
            svc.ended(EndReason(ended))
    return JSONResponse({"answers": [a.model_dump() for a in answers]})


@router.post("/release", openapi_extra=json_body.body_doc(ReleaseIn))
async def release(request: Request) -> JSONResponse:
    """A stopping worker gives up the sessions it still holds: they end ``drained`` (answered
    ``session_lost``) at once instead of when its polls have stopped for ``worker_ttl_s``."""
    st, who = authorize(request, Role.WORKER)
    svc = sessions_of(request)
    body = await json_body.read(request, ReleaseIn)
    bound_worker(who, body.worker_id)
    holder = holder_of(request, st, who)
    ended = []
    for sid in body.sessions:
        rec = await svc.store.get(sid)
        if rec is not None and rec.worker_id == body.worker_id and rec.holder == holder:
            got = await svc.store.end(sid, EndReason.DRAINED, svc.clock())
            if got is not None and got.end_reason is EndReason.DRAINED:
                svc.ended(EndReason.DRAINED)
                ended.append(sid)
    return JSONResponse({"ended": ended})


@router.get("/stats")
async def stats(request: Request) -> JSONResponse:
    """Admin: the session pool as the last sweep saw it (sessions, calls, workers and their spares)."""
    authorize(request)
    return JSONResponse(sessions_of(request).last_stats)
