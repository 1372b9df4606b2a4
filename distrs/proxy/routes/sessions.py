"""Trainer-facing session routes: open, exec, state, files, reward, delete (docs/sessions.md).

Tenant-scoped like tasks: a session is its tenant's, and another tenant's id answers 404 as an
unknown one does. An ended session answers its reason (404 ``session_deleted``; 410
``session_expired``, ``session_lost``, ``session_limit_exceeded``), never a fresh state; a create
past the tenant's quota answers 429 ``session_quota_exceeded``. Bad input is a 422 naming the
field (limits above the service's maxima included).

Every call goes through ``SessionService.call``: queued for the worker holding the session and
answered when it reports. ``exec_id`` makes an exec idempotent: repeated after a lost answer,
it returns the first answer and never runs twice.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
from typing import Any

from fastapi import APIRouter, Path, Request, Response
from pydantic import ValidationError

from distrs.core.sessions import EndReason, Language, OpKind, SessionLimits, SessionRecord, work_path
from distrs.proxy import body as json_body
from distrs.proxy.auth import Principal, Role, public_task
from distrs.proxy.deps import act_as, authorize
from distrs.proxy.errors import ApiError, from_errors
from distrs.proxy.responses import JSONResponse
from distrs.proxy.session_schemas import (
    ExecIn,
    ExecResult,
    FileIn,
    FilesIn,
    RewardIn,
    RewardOut,
    SessionCreate,
    SessionInfo,
    TestsPayload,
)
from distrs.proxy.sessions import SessionService, sessions_of

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], default_response_class=JSONResponse)
SID_PATTERN = r"^s[0-9a-f]{24}$"
SID = Path(pattern=SID_PATTERN, description="Session id (as POST /v1/sessions answered).")
_SID = re.compile(SID_PATTERN)
# The session id path parameter as the OpenAPI schema documents it, for the routes that read it
# themselves (``_session_id``) to be served on the hot path (``proxy/dispatch.py``).
_SID_PARAM = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "description": "Session id (as POST /v1/sessions answered).",
    "schema": {"type": "string", "pattern": SID_PATTERN},
}


def _session_id(request: Request) -> str:
    """The path's session id, checked as a declared parameter would be (422 naming it)."""
    sid: str = request.path_params["session_id"]
    if _SID.fullmatch(sid) is None:
        problem = f"String should match pattern '{SID_PATTERN}'"
        raise from_errors(
            [{"loc": ("path", "session_id"), "msg": problem, "type": "string_pattern_mismatch"}]
        )
    return sid


STATE_WAIT_S = 10.0


def _caller(request: Request) -> tuple[SessionService, Principal]:
    _, who = authorize(request, Role.TRAINER)
    return sessions_of(request), act_as(who, request.query_params.get("tenant"))


def _bounded(value: float | int, most: float | int, field: str) -> None:
    if value > most:
        raise ApiError(422, "invalid_request", f"{field}: at most {most:g} on this service", field=field)


def _limits(svc: SessionService, asked: SessionLimits | None) -> SessionLimits:
    s, lim = svc.settings, asked or SessionLimits()
    for name, most in (
        ("memory_mb", s.max_memory_mb),
        ("disk_mb", s.max_disk_mb),
        ("max_processes", s.max_processes),
        ("exec_cpu_s", s.max_exec_cpu_s),
        ("total_cpu_s", s.max_total_cpu_s),
    ):
        _bounded(getattr(lim, name), most, f"limits.{name}")
    return lim


def _files(svc: SessionService, files: dict[str, str | FileIn]) -> dict[str, str]:
    """The files of a create as path -> base64 (422 naming the file that is wrong)."""
    out: dict[str, str] = {}
    total = 0
    for path, f in files.items():
        where = f"files.{path}"
        try:
            work_path(path)
        except ValueError as e:
            raise ApiError(422, "invalid_request", f"{where}: {e}", field=where) from None
        if isinstance(f, str):
            data = f.encode()
        elif f.encoding == "base64":
            try:
                data = base64.b64decode(f.content, validate=True)
            except (binascii.Error, ValueError):
                raise ApiError(
                    422, "invalid_request", f"{where}.content: not base64", field=f"{where}.content"
                ) from None
        else:
            data = f.content.encode()
        total += len(data)
        _bounded(total, svc.settings.max_file_bytes, "files")
        out[path] = base64.b64encode(data).decode()
    return out


def _view(rec: SessionRecord) -> dict[str, Any]:
    return rec.view(public_task(rec.task))


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "session_not_found, session_deleted"},
    410: {"description": "session_expired, session_lost, session_limit_exceeded, session_create_failed"},
}


@router.post(
    "",
    status_code=201,
    responses={
        201: {"model": SessionInfo, "description": "Open: a worker holds it"},
        429: {"description": "session_quota_exceeded"},
        503: {"description": "no_session_capacity, session_create_failed (Retry-After)"},
    },
    openapi_extra=json_body.body_doc(SessionCreate),
)
async def create_session(request: Request) -> JSONResponse:
    """Open a session: 201 ``{session_id, ...}`` once a worker holds it (429 past the tenant's
    quota, 503 when no worker opened it within ``DISTRS_SESSION_CREATE_WAIT_S``)."""
    svc, who = _caller(request)
    body = await json_body.read(request, SessionCreate)
    s = svc.settings
    limits = _limits(svc, body.limits)
    idle = body.idle_timeout_s or s.idle_timeout_s
    life = body.max_lifetime_s or s.max_lifetime_s
    _bounded(idle, s.max_idle_timeout_s, "idle_timeout_s")
    _bounded(life, s.max_max_lifetime_s, "max_lifetime_s")
    files = _files(svc, body.files)
    now = svc.clock()
    sid = "s" + secrets.token_hex(12)
    rec = SessionRecord(
        session_id=sid,
        tenant=who.tenant,
        task=who.scope(body.task),
        language=body.language,
        created_at=now,
        last_used_at=now,
        idle_timeout_s=idle,
        max_lifetime_s=life,
        limits=limits,
    )
    op_body = {
        "language": body.language.value,
        "limits": limits.model_dump(),
        "files": files,
        "timeout_s": s.exec_timeout_s,
    }
    op = svc.new_op(rec, OpKind.CREATE, op_body, "create")
    t0 = time.perf_counter()
    await svc.store.create(rec, op, now, s.quota(who.tenant))
    done = await svc.wait(op.op_id, s.create_wait_s)
    if done is None or not done.done:
        await svc.store.end(sid, EndReason.CREATE_TIMEOUT, svc.clock())
        svc.ended(EndReason.CREATE_TIMEOUT)
        raise ApiError(
            503,
            "no_session_capacity",
            f"no session worker opened the session within {s.create_wait_s:g}s; retry",
            retry_after_s=5,
        )
    if done.error is not None:
        msg = str(done.error.get("message", ""))
        raise ApiError(
            503, "session_create_failed", f"the session could not be opened: {msg}", retry_after_s=5
        )
    svc.metrics.create_seconds.observe(time.perf_counter() - t0)
    svc.metrics.created.labels(body.language.value).inc()
    got = await svc.store.get(sid)
    return JSONResponse(_view(got or rec), status_code=201)


@router.post(
    "/{session_id}/exec",
    responses={200: {"model": ExecResult, "description": "The exec's outcome"}, **ERRORS},
    openapi_extra={**json_body.body_doc(ExecIn), "parameters": [_SID_PARAM]},
)
async def exec_code(request: Request) -> JSONResponse:
    """Run code in the session; its globals (python) or cwd, environment and variables (bash) and
    its files carry over to the next exec."""
    session_id = _session_id(request)
    svc, who = _caller(request)
    body = await json_body.read(request, ExecIn)
    timeout = body.timeout_s or svc.settings.exec_timeout_s
    _bounded(timeout, svc.settings.max_exec_timeout_s, "timeout_s")
    rec = await svc.scoped(who, session_id)
    suffix = f"x{body.exec_id}" if body.exec_id else "e" + secrets.token_hex(8)
    op = svc.new_op(rec, OpKind.EXEC, {"code": body.code, "stdin": body.stdin, "timeout_s": timeout}, suffix)
    t0 = time.perf_counter()
    done = await svc.call(rec, op, timeout + svc.settings.op_grace_s + 5.0)
    svc.metrics.exec_seconds.labels(rec.language.value).observe(time.perf_counter() - t0)
    result = dict(done.result or {})
    out = ExecResult.model_validate({k: result.get(k) for k in ExecResult.model_fields if k in result})
    return JSONResponse({**out.model_dump(), "exec_id": body.exec_id})


@router.get("/{session_id}", responses={200: {"model": SessionInfo, "description": "The session"}, **ERRORS})
async def get_session(request: Request, session_id: str = SID, kernel: bool = True) -> JSONResponse:
    """The session's record; with ``kernel`` (default) also what its interpreter holds (python:
    global names and types; bash: cwd) and its restarts and CPU time."""
    svc, who = _caller(request)
    rec = await svc.scoped(who, session_id)
    view = _view(rec)
    if kernel:
        op = svc.new_op(rec, OpKind.STATE, {}, "q" + secrets.token_hex(8))
        view["kernel"] = (await svc.call(rec, op, STATE_WAIT_S + svc.settings.op_grace_s)).result
    return JSONResponse(view)


@router.delete("/{session_id}", status_code=204, responses=ERRORS)
async def delete_session(request: Request, session_id: str = SID) -> Response:
    """End the session: its processes and files go; later calls answer 404 ``session_deleted``."""
    svc, who = _caller(request)
    rec = await svc.scoped(who, session_id)
    await svc.store.end(rec.session_id, EndReason.DELETED, svc.clock())
    svc.ended(EndReason.DELETED)
    return Response(status_code=204)


@router.get("/{session_id}/files")
async def list_files(request: Request, session_id: str = SID) -> JSONResponse:
    """The work dir's entries: ``{files: [{path, size, kind}]}`` (symlinks listed, not followed)."""
    svc, who = _caller(request)
    rec = await svc.scoped(who, session_id)
    op = svc.new_op(rec, OpKind.FILES_LIST, {}, "l" + secrets.token_hex(8))
    done = await svc.call(rec, op, STATE_WAIT_S + svc.settings.op_grace_s)
    return JSONResponse({"files": (done.result or {}).get("files", [])})


def _path(path: str) -> str:
    if path.startswith("tmp/"):  # /tmp of the session, readable
        return "/" + path
    try:
        work_path(path)
    except ValueError as e:
        raise ApiError(422, "invalid_request", f"path: {e}", field="path") from None
    return path


@router.get("/{session_id}/files/{path:path}")
async def read_file(request: Request, path: str, session_id: str = SID, encoding: str = "raw") -> Response:
    """A file of the work dir (or ``tmp/...``: the session's /tmp), as bytes; with
    ``?encoding=base64`` as JSON ``{path, size, content_b64}``."""
    svc, who = _caller(request)
    rec = await svc.scoped(who, session_id)
    body = {"path": _path(path), "max_bytes": svc.settings.max_file_bytes}
    op = svc.new_op(rec, OpKind.FILES_READ, body, "r" + secrets.token_hex(8))
    done = await svc.call(rec, op, STATE_WAIT_S + svc.settings.op_grace_s)
    content = (done.result or {}).get("content_b64")
    if content is None:
        raise ApiError(
            404,
            "file_not_found",
            f"path: no regular file {path!r} of at most {svc.settings.max_file_bytes} bytes",
            field="path",
        )
    data = base64.b64decode(content)
    if encoding == "base64":
        return JSONResponse({"path": path, "size": len(data), "content_b64": content})
    if encoding != "raw":
        raise ApiError(422, "invalid_request", "encoding: raw or base64", field="encoding")
    return Response(data, media_type="application/octet-stream")


@router.put("/{session_id}/files/{path:path}", status_code=204)
async def write_file(request: Request, path: str, session_id: str = SID) -> Response:
    """Write the request body (bytes) as a file of the work dir."""
    svc, who = _caller(request)
    if path.startswith("tmp/"):
        raise ApiError(422, "invalid_request", "path: files are written into the work dir only", field="path")
    data = await json_body.raw(request)
    _bounded(len(data), svc.settings.max_file_bytes, "body")
    rec = await svc.scoped(who, session_id)
    body = {"path": _path(path), "content_b64": base64.b64encode(data).decode()}
    op = svc.new_op(rec, OpKind.FILES_WRITE, body, "w" + secrets.token_hex(8))
    await svc.call(rec, op, STATE_WAIT_S + svc.settings.op_grace_s)
    return Response(status_code=204)


@router.post("/{session_id}/files", status_code=204, openapi_extra=json_body.body_doc(FilesIn))
async def write_files(request: Request, session_id: str = SID) -> Response:
    """Write several files into the work dir: ``{files: {path: text | {content, encoding}}}``."""
    svc, who = _caller(request)
    body = await json_body.read(request, FilesIn)
    files = _files(svc, body.files)
    rec = await svc.scoped(who, session_id)
    for path, content in files.items():
        op = svc.new_op(
            rec, OpKind.FILES_WRITE, {"path": path, "content_b64": content}, "w" + secrets.token_hex(8)
        )
        await svc.call(rec, op, STATE_WAIT_S + svc.settings.op_grace_s)
    return Response(status_code=204)


@router.post(
    "/{session_id}/reward",
    responses={200: {"model": RewardOut, "description": "The reward"}, **ERRORS},
    openapi_extra=json_body.body_doc(RewardIn),
)
async def reward(request: Request, session_id: str = SID) -> JSONResponse:
    """A reward computed on the session's state: ``{status, score, detail}`` (docs/sessions.md)."""
    svc, who = _caller(request)
    body = await json_body.read(request, RewardIn)
    try:
        payload = TestsPayload.model_validate(body.payload)
    except ValidationError as e:
        raise from_errors([{**err, "loc": ("payload", *err["loc"])} for err in e.errors()]) from None
    timeout = payload.timeout_s or svc.settings.exec_timeout_s
    _bounded(timeout, svc.settings.max_exec_timeout_s, "payload.timeout_s")
    rec = await svc.scoped(who, session_id)
    tests = [t.model_dump() for t in payload.tests]
    op = svc.new_op(rec, OpKind.TEST, {"tests": tests, "timeout_s": timeout}, "t" + secrets.token_hex(8))
    done = await svc.call(rec, op, timeout * len(tests) + svc.settings.op_grace_s + 5.0)
    return JSONResponse(score_tests(payload, (done.result or {}).get("tests", []), rec.language))


def score_tests(payload: TestsPayload, runs: list[dict[str, Any]], language: Language) -> dict[str, Any]:
    """The reward of a ``tests`` payload from each test's exec result."""
    cases = []
    for test, run in zip(payload.tests, runs, strict=False):
        ok = run.get("error") is None and not run.get("timed_out")
        if language is Language.BASH:
            ok = ok and run.get("exit_code") == 0
        if ok and test.expected_stdout is not None:
            ok = str(run.get("stdout", "")).rstrip() == test.expected_stdout.rstrip()
        cases.append(
            {
                "passed": ok,
                "stdout": run.get("stdout", ""),
                "error": run.get("error"),
                "exit_code": run.get("exit_code"),
            }
        )
    passed = sum(c["passed"] for c in cases)
    n = len(payload.tests)
    score = passed / n if payload.scoring == "fraction" else float(passed == n)
    timed_out = any(r.get("timed_out") for r in runs)
    status = "ok" if passed == n else "timeout" if timed_out else "wrong_answer"
    return {"status": status, "score": score, "detail": {"passed": passed, "total": n, "tests": cases}}
