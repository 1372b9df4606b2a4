"""Trainer-facing routes: register batches, submit requests, read results (long-poll and SSE).

Every task name a trainer gives is its tenant's: the store only ever sees ``TENANT/TASK``
(``Principal.scope``) and responses carry the name the trainer used. Path ids are checked
against the same pattern as body ids (``schemas.ID_PATTERN``): 422 naming the parameter.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Field, TypeAdapter, ValidationError

from distrs.core.model import BatchInfo, RequestState, Result
from distrs.proxy import body as json_body
from distrs.proxy import params, quotas
from distrs.proxy.auth import Principal, Role, public_task
from distrs.proxy.deps import AppState, act_as, authorize, get_state, trainer
from distrs.proxy.errors import ApiError, invalid
from distrs.proxy.responses import JSONResponse
from distrs.proxy.schemas import (
    ID_PATTERN,
    ID_RULE,
    BatchCreate,
    BatchResults,
    BulkRequests,
    RequestIn,
    SubmitResponse,
)
from distrs.rewards.routing import route
from distrs.store.base import NewRequest
from distrs.store.errors import UnknownBatch

router = APIRouter(prefix="/v1", tags=["trainer"], default_response_class=JSONResponse)
_RESULTS = TypeAdapter(list[Result])
TaskPath = Path(pattern=ID_PATTERN, description=f"Task id ({ID_RULE}).")
BatchPath = Path(pattern=ID_PATTERN, description=f"Batch id ({ID_RULE}).")
RequestPath = Path(pattern=ID_PATTERN, description=f"Request id ({ID_RULE}).")
# The range of ``?wait_s=`` (422 outside it); a wait above the proxy's max_wait_s is served as that.
MAX_WAIT_QUERY_S = 3600.0
TENANT_DOC = "Admin only: act for this tenant (default: the token's own)."
_WAIT_QUERY = TypeAdapter(Annotated[float, Field(ge=0, le=MAX_WAIT_QUERY_S)])


@router.post("/batches", status_code=201, openapi_extra=json_body.body_doc(BatchCreate))
async def register_batch(request: Request) -> JSONResponse:
    """Register a batch; also the rollout-start hint the planner warms workers up on."""
    st, who = authorize(request, Role.TRAINER)
    who = act_as(who, request.query_params.get("tenant"))
    body = await json_body.read(request, BatchCreate)
    if body.reward_type is not None and body.reward_type not in st.table.reward_types:
        raise ApiError(
            422, "unknown_reward_type", _unknown_type_msg(st, body.reward_type), field="reward_type"
        )
    now = st.clock()
    started = now if body.rollout_started_at is None else body.rollout_started_at
    # EBF ranks batches by T estimated from this hint (paper Sec. 5.2): a backdated or future
    # value would move this tenant's batches ahead of (or behind) others', so it is held to
    # [now - skew, now]
    started = min(now, max(now - st.settings.rollout_start_skew_s, started))
    info = BatchInfo(
        tenant=who.tenant,
        task=who.scope(body.task),
        batch_id=body.batch_id,
        size=body.size,
        reward_type=body.reward_type,
        rollout_started_at=started,
    )
    batch, created = await st.store.register_batch(info, now)
    return JSONResponse(_public_batch(batch), status_code=201 if created else 200)


def _public_batch(b: BatchInfo) -> dict[str, Any]:
    return b.model_dump(exclude={"tenant"}) | {"task": public_task(b.task)}


def _unknown_type_msg(st: AppState, name: str) -> str:
    return f"unknown reward_type {name!r}; known: {', '.join(sorted(st.table.reward_types))}"


@router.post(
    "/requests",
    status_code=202,
    response_model=SubmitResponse,
    openapi_extra=json_body.body_doc(RequestIn, BulkRequests),
)
async def submit(request: Request) -> JSONResponse:
    """Submit one request object or ``{"requests": [...]}``; idempotent per (task, request_id)."""
    st, who = authorize(request, Role.TRAINER)
    who = act_as(who, request.query_params.get("tenant"))
    data = json_body.loads(await json_body.raw(request))
    bulk = isinstance(data, dict) and "requests" in data
    items = _parse_requests(data, st.settings.max_bulk)
    news: list[NewRequest] = []
    for i, it in enumerate(items):
        where = f"requests.{i}." if bulk else ""
        if it.reward_type not in st.table.reward_types:
            raise ApiError(
                422,
                "unknown_reward_type",
                f"{where}reward_type: {_unknown_type_msg(st, it.reward_type)}",
                field=f"{where}reward_type",
            )
        check_payload(st, it.payload, f"{where}payload")
        stages = route(st.table, it.reward_type, it.payload)
        news.append(
            NewRequest(
                tenant=who.tenant,
                task=who.scope(it.task),
                batch_id=it.batch_id,
                request_id=it.request_id,
                reward_type=it.reward_type,
                route=stages,
                payload=it.payload,
            )
        )
    await quotas.check(st.store, st.settings, who.tenant, len(news), st.clock())
    out = await st.store.submit(news, st.clock())
    accepted, per_type = set(out.accepted), Counter[str]()
    for n in news:
        if n.request_id in accepted:
            per_type[n.reward_type] += 1
    for reward_type, count in per_type.items():  # once per reward type, not per request
        st.metrics.requests_submitted.labels(reward_type).inc(count)
    body = {
        "accepted": len(out.accepted),
        "duplicates": len(out.duplicates),
        "accepted_ids": out.accepted,
        "duplicate_ids": out.duplicates,
    }
    return JSONResponse(body, status_code=202)


def _parse_requests(data: Any, max_bulk: int) -> list[RequestIn]:
    try:
        if isinstance(data, dict) and "requests" in data:
            items = data["requests"]
            if isinstance(items, list) and len(items) > max_bulk:  # before validating any of them
                raise too_many("requests", len(items), max_bulk)
            return BulkRequests.model_validate(data).requests
        return [RequestIn.model_validate(data)]
    except ValidationError as exc:
        raise invalid(exc) from None


def too_many(field: str, n: int, limit: int) -> ApiError:
    """413 for a call carrying more items than one bulk submit may (``max_bulk``)."""
    return ApiError(
        413, "too_many_requests_in_bulk", f"{field}: {n} items; the limit is {limit}", field=field
    )


def check_payload(st: AppState, payload: Any, where: str, limit: int | None = None) -> None:
    """413 when ``payload`` encodes to more than ``limit`` (default ``max_payload_bytes``); 422
    when it cannot be encoded at all (a lone surrogate that reached a payload past the body reader)."""
    top = st.settings.max_payload_bytes if limit is None else limit
    try:
        size = len(orjson.dumps(payload))
    except orjson.JSONEncodeError:
        inner = json_body.surrogate_path(payload)
        field = f"{where}.{inner}" if inner and inner != "body" else where
        raise ApiError(
            422, "invalid_string", f"{field}: not valid Unicode text (a lone surrogate)", field=field
        ) from None
    if size > top:
        raise ApiError(
            413,
            "payload_too_large",
            f"{where}: {size} bytes; the limit is {top}",
            field=where,
        )


async def _batch_for(st: AppState, who: Principal, task: str, batch_id: str) -> BatchInfo:
    batch = await st.store.get_batch(who.scope(task), batch_id)
    if batch is None or not who.can_see(batch.tenant):
        raise UnknownBatch(f"batch {batch_id!r} of task {task!r} not found", field="batch_id")
    return batch


@router.get("/requests/{task}/{request_id}")
async def get_request(
    task: str = TaskPath,
    request_id: str = RequestPath,
    tenant: str | None = Query(None, description=TENANT_DOC),
    who: Principal = Depends(trainer),
    st: AppState = Depends(get_state),
) -> dict[str, Any]:
    rec = await st.store.get_request(who.scope(task), request_id)
    if rec is None or not who.can_see(rec.tenant):
        raise ApiError(
            404, "unknown_request", f"request {request_id!r} of task {task!r} not found", field="request_id"
        )
    body: dict[str, Any] = {
        "task": task,
        "batch_id": rec.batch_id,
        "request_id": rec.request_id,
        "state": rec.state.value,
        "stage": rec.stage if rec.state is not RequestState.DONE else None,
        "attempts": rec.attempts,
    }
    if rec.result is not None:
        body["result"] = rec.result.model_dump(mode="json")
    return body


_RESULTS_PARAMS: list[dict[str, Any]] = [
    {"name": "task", "in": "path", "required": True, "description": f"Task id ({ID_RULE}).",
     "schema": {"type": "string", "pattern": ID_PATTERN}},
    {"name": "batch_id", "in": "path", "required": True, "description": f"Batch id ({ID_RULE}).",
     "schema": {"type": "string", "pattern": ID_PATTERN}},
    {"name": "wait_s", "in": "query", "required": False,
     "description": "Long-poll up to this many seconds (served up to max_wait_s).",
     "schema": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_QUERY_S, "default": 0.0}},
    {"name": "tenant", "in": "query", "required": False, "description": TENANT_DOC,
     "schema": {"type": "string"}},
]  # fmt: skip


@router.get(
    "/batches/{task}/{batch_id}/results",
    response_model=BatchResults,
    openapi_extra={"parameters": _RESULTS_PARAMS},
)
async def batch_results(request: Request) -> JSONResponse:
    """Results so far; with ``wait_s`` waits until the batch completes or the time is up.

    A plain handler (``dispatch.py``): its parameters are checked here as FastAPI would
    check the declared ones (``params.py``: the same 422s, naming ``path.task`` or
    ``query.wait_s``), after the caller's token, as FastAPI would."""
    st, who = authorize(request, Role.TRAINER)
    who = act_as(who, request.query_params.get("tenant"))
    found = params.Found()
    task = found.path(request, "task", params.ID)
    batch_id = found.path(request, "batch_id", params.ID)
    wait_s = found.query(request, "wait_s", _WAIT_QUERY, 0.0)
    found.check()
    wait_s = min(wait_s, st.settings.max_wait_s)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    batch = await _batch_for(st, who, task, batch_id)
    while not batch.complete and (left := deadline - loop.time()) > 0:
        await st.store.wait_batch(who.scope(task), batch_id, min(left, 5.0), until_complete=True)
        batch = await _batch_for(st, who, task, batch_id)
    results = await st.store.batch_results(who.scope(task), batch_id)
    # BatchResults' fields in its order, built directly: validating and dumping a 16k-result body
    # through the model again cost about 120 ms of event loop; the results are dumped in one call
    body = {
        "task": task,
        "batch_id": batch_id,
        "size": batch.size,
        "done": batch.done,
        "complete": batch.complete,
        "results": _RESULTS.dump_python(results, mode="json"),
        "extra_delay_s": batch.extra_delay_s,
    }
    return JSONResponse(body)


@router.get("/batches/{task}/{batch_id}/events")
async def batch_events(
    request: Request,
    task: str = TaskPath,
    batch_id: str = BatchPath,
    tenant: str | None = Query(None, description=TENANT_DOC),
    who: Principal = Depends(trainer),
    st: AppState = Depends(get_state),
) -> StreamingResponse:
    """Server-sent events: one ``result`` event per finished request, then ``complete``."""
    await _batch_for(st, who, task, batch_id)

    async def stream() -> AsyncIterator[bytes]:
        sent: set[str] = set()
        while True:
            batch = await _batch_for(st, who, task, batch_id)
            for r in await st.store.batch_results(who.scope(task), batch_id):
                if r.request_id not in sent:
                    sent.add(r.request_id)
                    yield b"event: result\ndata: " + orjson.dumps(r.model_dump(mode="json")) + b"\n\n"
            if batch.complete:
                done = {"done": batch.done, "extra_delay_s": batch.extra_delay_s}
                yield b"event: complete\ndata: " + orjson.dumps(done) + b"\n\n"
                return
            if await request.is_disconnected():
                return
            await st.store.wait_batch(who.scope(task), batch_id, 5.0)
            yield b": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
