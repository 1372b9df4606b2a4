"""Worker-facing routes: lease (long-poll), heartbeat, complete, release.

These are the proxy's hottest paths (two calls per request per stage), so they take the raw
request, authorize it directly and read the body themselves (``proxy/body.py``, as every other
route: orjson, then the pydantic model; a lone surrogate is a 422 naming its field) instead of
declaring FastAPI dependencies: dependency resolution cost more than the work itself. The
OpenAPI schema still documents each body. Lease ids in paths follow the one id rule.

A lease long-poll parks on the store's wake-up for its stage; it never spins. Completing moves the
request to its next stage (with artifacts, size-capped) or records its final result; the metrics
for run time, queue time, final status and batch extra delay are recorded here.

Ownership: a lease belongs to the credential that took it, not to the ``worker_id`` in a body
(which any caller can write). A worker normally calls with a credential of its own (exchanged for
the shared worker token, ``routes/workers.py``): the holder is that credential's session, and the
credential may speak only for the worker id it is bound to (403 naming ``worker_id``). A caller
with a plain token holds leases as a short hash of that token (one fixed identity under
``--insecure``). Heartbeat, complete and release from any other credential get 403
``lease_not_yours``. ``worker_id`` stays in the records for display.

Recovery: the lease response tells the worker its heartbeat period, ``lease_ttl_s / 3``, so a
lease whose worker stops is requeued by the reaper within about three heartbeat periods while a
long run stays alive by its heartbeats.

Bundles (``/bundle``, ``/heartbeat``, ``/complete`` without a lease id): up to ``MAX_BUNDLE``
leases of one stage in one call, in queue order, each its own lease; heartbeat and completion
answer per lease, so one refused lease (expired, another token's, a bad item) never keeps the
others from landing; a bundle's metrics are recorded once per bundle (``_record_many``). The
single-lease routes are unchanged.

A ``next`` the store refuses ``no_next_stage`` goes through ``route_backfill.py`` before it is
answered: a request submitted by a release that stored no route gets its route and the
completion goes again, once.

A lease whose body cannot be rendered (a payload the JSON encoder refuses) is never handed out
and never left held: its request ends ``invalid`` with the reason, and the long-poll goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from distrs.core.model import Completion, Lease, Result, Status
from distrs.proxy import body as json_body
from distrs.proxy import route_backfill
from distrs.proxy.auth import Principal, Role
from distrs.proxy.deps import AppState, authorize, bound_worker
from distrs.proxy.errors import ApiError, from_errors
from distrs.proxy.responses import JSONResponse
from distrs.proxy.schemas import (
    ID_PATTERN,
    ID_RULE,
    BundleCompleteItem,
    BundleCompleteRequest,
    BundleHeartbeatRequest,
    CompleteRequest,
    HeartbeatRequest,
    LeaseBundleRequest,
    LeaseRequest,
    ReleaseRequest,
)
from distrs.store.base import CompleteOutcome
from distrs.store.errors import NoNextStage, StoreError

log = logging.getLogger(__name__)

# The holder identity every caller shares under --insecure (no tokens, local demos only).
INSECURE_HOLDER = "insecure"
# Heartbeats per lease TTL the proxy asks for: a lost lease is requeued after about this many
# missed heartbeats.
HEARTBEATS_PER_TTL = 3.0

router = APIRouter(prefix="/v1/leases", tags=["worker"])
M = TypeVar("M", bound=BaseModel)
_LEASE_ID = re.compile(ID_PATTERN)
# The lease id path parameter as the OpenAPI schema documents it.
_LEASE_PARAM = {
    "name": "lease_id",
    "in": "path",
    "required": True,
    "description": f"Lease id ({ID_RULE}).",
    "schema": {"type": "string", "pattern": ID_PATTERN},
}


def _body_doc(model: type[BaseModel], lease_param: bool = False) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    doc: dict[str, Any] = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
    }
    if lease_param:
        doc["parameters"] = [_LEASE_PARAM]
    return doc


def _lease_id(request: Request) -> str:
    """The lease id of the path, which follows the one id rule (``schemas.ID_PATTERN``): else 422
    ``path.lease_id: ...``, as a declared path parameter would answer. Read here rather than
    declared: FastAPI's dependency resolution for one path parameter cost the completion route
    more CPU than its own work (see the module docstring)."""
    lease_id: str = request.path_params["lease_id"]
    if _LEASE_ID.fullmatch(lease_id) is None:
        raise from_errors(
            [
                {
                    "loc": ("path", "lease_id"),
                    "msg": f"String should match pattern '{ID_PATTERN}'",
                    "type": "string_pattern_mismatch",
                }
            ]
        )
    return lease_id


def holder_of(request: Request, st: AppState, who: Principal | None = None) -> str:
    """The identity of the caller's credential: its session for a worker's own credential, else a
    short hash of its bearer token.

    Only called after ``authorize`` accepted the token. The hash (not the token) is what the store
    keeps, so a leaked store record reveals no credential.
    """
    if who is not None and who.holder is not None:
        return who.holder
    if st.settings.insecure:
        return INSECURE_HOLDER
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return "tok-" + hashlib.sha256(token.encode()).hexdigest()[:24]


def heartbeat_period(ttl_s: float) -> float:
    """The heartbeat period a worker is told to keep: a third of the lease TTL."""
    return ttl_s / HEARTBEATS_PER_TTL


async def _parse(request: Request, model: type[M]) -> M:
    """The body as ``model``, read like every other route's (``proxy/body.py``): 400 for
    malformed JSON, 422 naming the field for a lone surrogate or an invalid value."""
    return json_body.parse(await json_body.raw(request), model)


@router.post(
    "", responses={204: {"description": "nothing to do within wait_s"}}, openapi_extra=_body_doc(LeaseRequest)
)
async def lease(request: Request) -> Response:
    """Long-poll for the head of a stage's queue: 200 with a lease, or 204 after ``wait_s``."""

    async def take(st: AppState, body: LeaseRequest, holder: str, ttl: float) -> Response | None:
        while (
            got := await st.store.lease(body.stage, body.worker_id, st.clock(), ttl, holder=holder)
        ) is not None:
            view = got.model_dump(mode="json", exclude={"holder"})
            view["heartbeat_s"] = heartbeat_period(ttl)
            try:
                return JSONResponse(view)
            except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
                await _end_unrenderable(st, got, holder, exc)
        return None

    return await _long_poll(request, LeaseRequest, take)


_Poll = TypeVar("_Poll", LeaseRequest, LeaseBundleRequest)


async def _long_poll(
    request: Request,
    model: type[_Poll],
    take: Callable[[AppState, _Poll, str, float], Awaitable[Response | None]],
) -> Response:
    """Shared by the lease routes: check the caller and the stage, then ask ``take`` for work
    until it answers or ``wait_s`` has passed (204)."""
    st, who = authorize(request, Role.WORKER)
    body = await _parse(request, model)
    bound_worker(who, body.worker_id)
    _known_stage(st, body.stage)
    holder = holder_of(request, st, who)
    st.workers[body.worker_id] = (body.stage, st.clock())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(body.wait_s, st.settings.max_wait_s)
    while True:
        answer = await take(st, body, holder, st.settings.lease_ttl_s)
        if answer is not None:
            return answer
        left = deadline - loop.time()
        if left <= 0:
            return Response(status_code=204)
        await st.store.wait_for_work(body.stage, min(left, 5.0))


@router.post("/{lease_id}/heartbeat", openapi_extra=_body_doc(HeartbeatRequest, lease_param=True))
async def heartbeat(request: Request) -> JSONResponse:
    """Extend a live lease by the lease TTL."""
    lease_id = _lease_id(request)
    st, who = authorize(request, Role.WORKER)
    bound_worker(who, (await _parse(request, HeartbeatRequest)).worker_id)
    ttl = st.settings.lease_ttl_s
    deadline = await st.store.heartbeat(lease_id, holder_of(request, st, who), st.clock(), ttl)
    return JSONResponse({"lease_id": lease_id, "deadline": deadline, "heartbeat_s": heartbeat_period(ttl)})


@router.post("/{lease_id}/release", openapi_extra=_body_doc(ReleaseRequest, lease_param=True))
async def release(request: Request) -> JSONResponse:
    """Give a live lease back unworked: the request goes back to its place in the queue and the
    attempt does not count (a worker that was told to stop while it waited for work)."""
    lease_id = _lease_id(request)
    st, who = authorize(request, Role.WORKER)
    bound_worker(who, (await _parse(request, ReleaseRequest)).worker_id)
    stage = await st.store.release(lease_id, holder_of(request, st, who), st.clock())
    st.metrics.lease_releases.labels(stage).inc()
    return JSONResponse({"lease_id": lease_id, "released": True})


@router.post("/{lease_id}/complete", openapi_extra=_body_doc(CompleteRequest, lease_param=True))
async def complete(request: Request) -> JSONResponse:
    """Finish a lease: ``next`` (with artifacts) or ``final`` (with a result)."""
    lease_id = _lease_id(request)
    st, who = authorize(request, Role.WORKER)
    body = await _parse(request, CompleteRequest)
    bound_worker(who, body.worker_id)
    item = _completion(st, lease_id, body)
    holder = holder_of(request, st, who)
    try:
        out = await st.store.complete(item, holder, st.clock())
    except NoNextStage as refused:  # perhaps a request of a release that stored no route
        out = await route_backfill.complete_again(st.store, st.table, item, holder, st.clock, refused)
    await _record(st, out.request, out.batch_completed)
    return JSONResponse(_completed_view(lease_id, out))


# bundles ------------------------------------------------------------------------------------


@router.post(
    "/bundle",
    responses={204: {"description": "nothing to do within wait_s"}},
    openapi_extra=_body_doc(LeaseBundleRequest),
)
async def lease_bundle(request: Request) -> Response:
    """Long-poll for up to ``max_items`` requests of a stage in queue order (EBF, FCFS within a
    batch), each its own lease: 200 ``{leases, heartbeat_s}`` with at least one, or 204."""

    async def take(st: AppState, body: LeaseBundleRequest, holder: str, ttl: float) -> Response | None:
        got = await st.store.lease_many(body.stage, body.worker_id, st.clock(), ttl, body.max_items, holder)
        views: list[bytes] = []
        for lease in got:
            try:
                views.append(orjson.dumps(lease.model_dump(mode="json", exclude={"holder"})))
            except (TypeError, ValueError) as exc:
                await _end_unrenderable(st, lease, holder, exc)
        if not views:
            return None
        head = b'{"heartbeat_s":' + orjson.dumps(heartbeat_period(ttl)) + b',"leases":['
        return Response(head + b",".join(views) + b"]}", media_type="application/json")

    return await _long_poll(request, LeaseBundleRequest, take)


@router.post("/heartbeat", openapi_extra=_body_doc(BundleHeartbeatRequest))
async def heartbeat_bundle(request: Request) -> JSONResponse:
    """Extend several leases in one call; each answers for itself: ``deadlines`` of the extended
    ones, ``errors`` (code, message) of the refused ones (expired, unknown, another token's)."""
    st, who = authorize(request, Role.WORKER)
    body = await _parse(request, BundleHeartbeatRequest)
    bound_worker(who, body.worker_id)
    ttl = st.settings.lease_ttl_s
    out = await st.store.heartbeat_many(body.lease_ids, holder_of(request, st, who), st.clock(), ttl)
    deadlines: dict[str, float] = {}
    errors: dict[str, Any] = {}
    for lease_id, got in zip(body.lease_ids, out, strict=True):
        if isinstance(got, StoreError):
            errors[lease_id] = {"code": got.code, "message": got.message}
        else:
            deadlines[lease_id] = got
    return JSONResponse({"deadlines": deadlines, "errors": errors, "heartbeat_s": heartbeat_period(ttl)})


@router.post("/complete", openapi_extra=_body_doc(BundleCompleteRequest))
async def complete_bundle(request: Request) -> JSONResponse:
    """Finish several leases in one call, each for itself (never all or nothing): ``items`` in
    the order given, each the single completion's answer or ``{lease_id, error}``."""
    st, who = authorize(request, Role.WORKER)
    body = await _parse(request, BundleCompleteRequest)
    bound_worker(who, body.worker_id)
    views: list[dict[str, Any] | None] = [None] * len(body.items)
    todo: list[tuple[int, Completion]] = []
    for i, it in enumerate(body.items):
        try:
            todo.append((i, _completion(st, it.lease_id, it)))
        except ApiError as exc:
            views[i] = {"lease_id": it.lease_id, "error": {"code": exc.code, "message": exc.message}}
    holder = holder_of(request, st, who)
    items = [c for _, c in todo]
    outs = await st.store.complete_many(items, holder, st.clock())
    if any(isinstance(out, NoNextStage) for out in outs):  # perhaps requests of an earlier release
        outs = await route_backfill.complete_many_again(st.store, st.table, items, outs, holder, st.clock)
    landed: list[CompleteOutcome] = []
    for (i, c), out in zip(todo, outs, strict=True):
        if isinstance(out, StoreError):
            views[i] = {"lease_id": c.lease_id, "error": {"code": out.code, "message": out.message}}
        else:
            landed.append(out)
            views[i] = _completed_view(c.lease_id, out)
    await _record_many(st, landed)
    return JSONResponse({"items": views})


# shared -------------------------------------------------------------------------------------


def _known_stage(st: AppState, stage: str) -> None:
    if stage not in st.table.stages:
        raise ApiError(
            422,
            "unknown_stage",
            f"stage: unknown stage {stage!r}; known: {', '.join(st.table.stages)}",
            field="stage",
        )


def _completion(st: AppState, lease_id: str, body: CompleteRequest | BundleCompleteItem) -> Completion:
    """One completion as the store takes it, checked: artifacts within their size cap, a result
    with ``final``. Where ``next`` leads is the store's to say (the request's route)."""
    art_size = sum(len(k) + len(v) for k, v in (body.artifacts or {}).items())
    if art_size > st.settings.max_artifact_bytes:
        raise ApiError(
            413,
            "artifacts_too_large",
            f"artifacts: {art_size} bytes; the limit is {st.settings.max_artifact_bytes}",
            field="artifacts",
        )
    if body.outcome == "next":
        return Completion(lease_id, "next", body.run_s, body.artifacts)
    if body.result is None:
        raise ApiError(422, "invalid_request", "result: required when outcome is 'final'", field="result")
    r = body.result
    result = Result(request_id="", status=r.status, score=r.score, detail=r.detail)
    return Completion(lease_id, "final", body.run_s, body.artifacts, result)


def _completed_view(lease_id: str, out: CompleteOutcome) -> dict[str, Any]:
    return {
        "lease_id": lease_id,
        "request_id": out.request.request_id,
        "next_stage": out.next_stage,
        "batch_completed": out.batch_completed,
    }


async def _end_unrenderable(st: AppState, lease: Lease, holder: str, exc: Exception) -> None:
    """End a request whose lease cannot be rendered as JSON with a clear ``invalid`` result.

    Running it again could never succeed (the same payload would fail the same way), so it is
    finished rather than released. If the store refuses even that, the lease expires and is
    requeued, and after ``max_attempts`` the request ends ``internal_error``: never orphaned.
    """
    log.warning("lease %s of request %s cannot be rendered: %s", lease.lease_id, lease.request_id, exc)
    result = Result(
        request_id=lease.request_id,
        status=Status.INVALID,
        detail={"error": f"payload: cannot be encoded as JSON for a worker ({exc})"},
    )
    try:
        out = await st.store.complete(Completion(lease_id=lease.lease_id, result=result), holder, st.clock())
    except StoreError as err:
        log.warning("could not end unrenderable request %s: %s", lease.request_id, err.message)
        return
    await _record(st, out.request, out.batch_completed)


async def _record_many(st: AppState, outs: list[CompleteOutcome]) -> None:
    """A bundle's metrics, recorded once per bundle: each label set is looked up once and the
    counters are added to once per (stage) and (reward type, status); the histograms still get
    one observation per request."""
    busy: dict[str, float] = {}
    finished: dict[tuple[str, str], int] = {}
    runs: dict[str, list[tuple[float, float]]] = {}
    m = st.metrics
    for out in outs:
        rec = out.request
        last = rec.stages[-1]
        runs.setdefault(last.name, []).append((last.run_s, last.queued_s))
        busy[last.name] = busy.get(last.name, 0.0) + last.run_s
        if rec.result is not None:
            key = (rec.reward_type, rec.result.status.value)
            finished[key] = finished.get(key, 0) + 1
    for stage, pairs in runs.items():
        run_h, queue_h, busy_c = m.stage_children(stage)
        for run_s, queued_s in pairs:
            run_h.observe(run_s)
            queue_h.observe(queued_s)
        busy_c.inc(busy[stage])
    for (reward_type, status), n in finished.items():
        m.finished_child(reward_type, status).inc(n)
    for out in outs:
        if out.batch_completed:
            await _record_batch(st, out.request)


async def _record(st: AppState, rec: Any, batch_completed: bool) -> None:
    m = st.metrics
    last = rec.stages[-1]
    run_h, queue_h, busy = m.stage_children(last.name)
    run_h.observe(last.run_s)
    queue_h.observe(last.queued_s)
    busy.inc(last.run_s)
    if rec.result is not None:
        m.finished_child(rec.reward_type, rec.result.status.value).inc()
    if batch_completed:
        await _record_batch(st, rec)


async def _record_batch(st: AppState, rec: Any) -> None:
    """A finished batch's extra delay and spans (once per batch)."""
    m = st.metrics
    b = await st.store.get_batch(rec.task, rec.batch_id)
    if b is not None and b.extra_delay_s is not None:
        m.batch_extra_delay.labels(b.task).observe(b.extra_delay_s)
        if b.completed_at is not None:
            m.batch_actual_span.labels(b.task).set(b.completed_at - b.anchor)
        if b.estimated_completion is not None:
            m.batch_estimated_span.labels(b.task).set(b.estimated_completion - b.anchor)
