"""Drop-in endpoints for trainers that already speak another reward protocol.

* SandboxFusion ``POST /run_code`` - what verl's sandbox integration calls per test case: run one
  program (any language of ``distrs/core/languages.yaml``, by its name or SandboxFusion's;
  ``cuda`` where the service has GPU workers) on ``stdin`` with ``files``/``fetch_files`` and
  ``memory_limit_MB``, and return SandboxFusion's response with its status and message rules
  (``status`` Success|Failed|SandboxError, ``compile_result``, ``run_result`` with ``status``
  Finished|Error|TimeLimitExceeded, ``files``); output is kept up to SandboxFusion's 1 MiB per
  stream and any cut is said in ``message``. The wait ends before verl's own request timeout
  (``compile_timeout + run_timeout + 10`` s) and the batch id is derived from the request, so
  verl's retry of a 504 reattaches to the first attempt's run.
* OpenRLHF ``POST /get_reward`` - the remote reward model protocol: ``{"query", "prompts",
  "labels"}`` in, ``{"rewards", "scores", "extra_logs"}`` out, scored with one reward type
  (``math`` unless the ``X-DistRS-Reward-Type`` header says otherwise). Only the response is
  graded: what follows the prompt inside each query (``rewards/prompt_split.py``: after leading
  special tokens, or the prompt's longest end part when it was cut from the left); a row whose
  prompt cannot be found at all is never graded whole: its reward is 0 and
  ``extra_logs["distrs_prompt_not_found"]`` says why, and the rest of the call is scored. The default wait (170 s)
  ends before OpenRLHF's own 180 s request timeout, and a call without ``X-DistRS-Batch`` gets a
  batch id derived from its content, so the client's retry of a timed-out call waits on the
  same batch instead of running it again.

All go through exactly the pipelines ``/v1/requests`` uses: the call registers a batch, submits
its requests to the store (so EBF queues, the planner and history all see them) and waits for the
batch's results. Bodies are read like every other route's (``proxy/body.py``: orjson, lone
surrogates refused naming the field) and held to the same limits: ``/get_reward`` rows count
against ``max_bulk`` and each row's payload against ``max_payload_bytes``. Optional headers:
``X-DistRS-Task`` (default ``sandboxfusion`` / ``openrlhf``; like every task it belongs to the
caller's tenant, so another tenant cannot take it),
``X-DistRS-Batch`` (the batch id; give the same id when retrying a call and the retry returns the
first call's results instead of running anything twice), ``X-DistRS-Timeout`` (seconds to wait, at most ``compat_wait_s``).

Neither framework's client sends credentials, so besides ``Authorization: Bearer`` these routes
accept the trainer token as a ``?token=`` query parameter (it is part of the URL both frameworks
let you configure).

``/run_code`` is served by the judged handlers: the program runs as one test case with
``"mode": "raw"``, so the handler reports the run itself (``detail["run"]``: ``stdout``/``stderr``
up to 1 MiB with truncation flags, ``return_code``, whether it timed out or hit the output cap)
and the fetched files (``detail["files"]``). slime's route lives in ``slime.py``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import re
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from distrs.core.languages import find_language, language_reward_type, language_table
from distrs.core.model import BatchInfo, Result, Status
from distrs.proxy import body as json_body
from distrs.proxy import quotas
from distrs.proxy.auth import INSECURE, Principal, Role
from distrs.proxy.deps import AppState, act_as, get_state
from distrs.proxy.errors import ApiError
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes.trainer import check_payload, too_many
from distrs.proxy.schemas import ID_PATTERN, ID_RULE
from distrs.rewards.judge import RAW_OUTPUT_BYTES, InvalidPayload, check_file_path, check_no_clash
from distrs.rewards.prompt_split import SplitError, split_response
from distrs.rewards.routing import route
from distrs.store.base import NewRequest

router = APIRouter(tags=["compat"])
log = logging.getLogger(__name__)

_ID = re.compile(ID_PATTERN)
# SandboxFusion language name -> our reward type.
# Languages not in languages.yaml: SandboxFusion name -> reward type.
EXTRA_LANGUAGES = {"cuda": "cuda"}


def run_code_language(name: str, served: dict[str, Any]) -> tuple[str, bool] | None:
    """(reward type, has a compile step) for a SandboxFusion language name this service serves."""
    found = find_language(name)
    if found is not None:
        canon, spec = found
        rt = language_reward_type(canon, spec)
        return (rt, spec.compile is not None) if rt in served else None
    extra = EXTRA_LANGUAGES.get(name.lower())
    return (extra, True) if extra is not None and extra in served else None


def served_languages(served: dict[str, Any]) -> list[str]:
    names = [n for n, spec in language_table().items() if language_reward_type(n, spec) in served]
    return names + [n for n, rt in EXTRA_LANGUAGES.items() if rt in served]


# ---------------------------------------------------------------- auth and batch plumbing


async def compat_principal(
    request: Request,
    token: str | None = Query(None, description="Trainer token, for clients that cannot set headers."),
    st: AppState = Depends(get_state),
) -> Principal:
    """Bearer header or ``?token=``; role trainer (or admin, acting for ``?tenant=``)."""
    if st.settings.insecure:
        return act_as(INSECURE, request.query_params.get("tenant"))
    scheme, _, header_token = request.headers.get("authorization", "").partition(" ")
    given = header_token.strip() if scheme.lower() == "bearer" and header_token.strip() else token
    if not given:
        raise ApiError(401, "unauthorized", "missing token (Authorization: Bearer TOKEN or ?token=TOKEN)")
    p = st.tokens.lookup(given)
    if p is None:
        raise ApiError(401, "unauthorized", "unknown token")
    if p.role not in (Role.TRAINER, Role.ADMIN):
        raise ApiError(403, "forbidden", f"this endpoint needs role trainer; token has {p.role.value}")
    return act_as(p, request.query_params.get("tenant"))


def _header_id(value: str | None, name: str, default: str) -> str:
    if value is None or value == "":
        return default
    if not _ID.match(value):
        raise ApiError(422, "invalid_header", f"{name}: must be {ID_RULE}", field=name)
    return value


def _default_task(base: str, who: Principal) -> str:
    """The default task of a compat route. Every task is the caller's tenant's (``run_batch``
    scopes it), so each tenant has its own ``base`` task and no other tenant can claim it."""
    del who  # scoping happens in run_batch, for default and X-DistRS-Task names alike
    return base


def _wait_s(value: str | None, st: AppState) -> float:
    """``X-DistRS-Timeout`` or the configured default (``compat_wait_s``, else 600 s); the
    header must be a number of seconds in (0, ``compat_wait_s``] (422 naming it otherwise)."""
    if value is None:
        return st.settings.compat_wait_s
    try:
        v = float(value)
    except ValueError:
        v = -1.0
    top = st.settings.compat_wait_s
    if not math.isfinite(v) or v <= 0 or v > top:
        raise ApiError(
            422,
            "invalid_header",
            f"X-DistRS-Timeout: must be a number of seconds in (0, {top:g}]",
            field="X-DistRS-Timeout",
        )
    return v


async def run_batch(
    st: AppState,
    who: Principal,
    task: str,
    batch_id: str,
    items: list[tuple[str, dict[str, Any]]],
    wait_s: float,
    bulk_field: str = "body",
    payload_limit: int | None = None,
) -> list[Result]:
    """Register a batch of ``(reward_type, payload)``, submit it and wait for every result.

    Request ids are ``{batch_id}-{i}``, so re-running the same call with the same batch id is
    idempotent: the store reports duplicates and the first results are returned. ``task`` is
    the caller's name; the store sees its tenant-scoped name. Oversize calls and payloads are
    refused (413) before anything is registered. Requests that end ``internal_error`` are run
    again (as new requests) up to ``compat_fault_retries`` times within the same wait.
    """
    if len(items) > st.settings.max_bulk:
        raise too_many(bulk_field, len(items), st.settings.max_bulk)
    for i, (_, payload) in enumerate(items):
        check_payload(st, payload, f"{bulk_field}.{i}" if bulk_field != "body" else "body", payload_limit)
    public, task = task, who.scope(task)
    for rt, _ in items:
        if rt not in st.table.reward_types:
            known = ", ".join(sorted(st.table.reward_types))
            raise ApiError(422, "unknown_reward_type", f"reward type {rt!r} is not served; known: {known}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    results = await _submit_and_wait(st, who, task, public, batch_id, items, deadline, wait_s)
    # Faults are never a score: requests that ended internal_error run again as batches
    # {batch_id}-f1, -f2, ... (fixed names, so a client's retry of this call reattaches to them).
    for k in range(1, st.settings.compat_fault_retries + 1):
        bad = [i for i, r in enumerate(results) if r.status is Status.INTERNAL_ERROR]
        if not bad:
            break
        if k == 1:
            first = results[bad[0]]
            log.warning(
                "compat %s/%s: %d of %d requests ended internal_error (%s); running them again up to %d times",
                public,
                batch_id,
                len(bad),
                len(results),
                first.detail.get("error") or first.detail.get("reason") or "no reason given",
                st.settings.compat_fault_retries,
            )
        again = await _submit_and_wait(
            st, who, task, public, f"{batch_id}-f{k}", [items[i] for i in bad], deadline, wait_s
        )
        for i, r in zip(bad, again, strict=True):
            results[i] = r
    return results


async def _submit_and_wait(
    st: AppState,
    who: Principal,
    task: str,
    public: str,
    batch_id: str,
    items: list[tuple[str, dict[str, Any]]],
    deadline: float,
    wait_s: float,
) -> list[Result]:
    """Register batch ``batch_id`` of the (already checked) items, submit them and wait until
    ``deadline`` (loop time) for every result; 504 past it."""
    types = {rt for rt, _ in items}
    now = st.clock()
    await quotas.check(st.store, st.settings, who.tenant, len(items), now)  # before anything is stored
    info = BatchInfo(
        tenant=who.tenant,
        task=task,
        batch_id=batch_id,
        size=len(items),
        reward_type=next(iter(types)) if len(types) == 1 else None,
        rollout_started_at=now,
    )
    await st.store.register_batch(info, now)
    news = [
        NewRequest(
            tenant=who.tenant,
            task=task,
            batch_id=batch_id,
            request_id=f"{batch_id}-{i}",
            reward_type=rt,
            route=route(st.table, rt, payload),
            payload=payload,
        )
        for i, (rt, payload) in enumerate(items)
    ]
    out = await st.store.submit(news, st.clock())
    accepted = set(out.accepted)
    for n in news:
        if n.request_id in accepted:
            st.metrics.requests_submitted.labels(n.reward_type).inc()
    loop = asyncio.get_running_loop()
    while True:
        batch = await st.store.get_batch(task, batch_id)
        if batch is not None and batch.completed_at is not None:
            break
        left = deadline - loop.time()
        if left <= 0:
            raise ApiError(
                504,
                "reward_timeout",
                f"batch {batch_id!r} of task {public!r} not complete after {wait_s:g} s",
                task=public,
                batch_id=batch_id,
            )
        await st.store.wait_batch(task, batch_id, min(left, 5.0), until_complete=True)
    by_id = {r.request_id: r for r in await st.store.batch_results(task, batch_id)}
    return [
        by_id.get(n.request_id) or Result(request_id=n.request_id, status=Status.INTERNAL_ERROR) for n in news
    ]


# ---------------------------------------------------------------- SandboxFusion /run_code

RUN_CODE_MARGIN_S = 5.0


def _hash(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


class RunCodeRequest(BaseModel):
    """SandboxFusion's RunCodeRequest (the fields verl and SandboxFusion's own SDK send)."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    compile_timeout: float = Field(10.0, gt=0)
    run_timeout: float = Field(10.0, gt=0)
    memory_limit_MB: int = Field(-1)
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


def run_code_payload(req: RunCodeRequest) -> dict[str, Any]:
    """The judged payload for one SandboxFusion run: one test case, empty expected output."""
    payload: dict[str, Any] = {
        "code": req.code,
        "tests": [{"stdin": req.stdin or "", "expected_stdout": ""}],
        "compare": "exact",
        "scoring": "all",
        "time_limit_s": req.run_timeout,
        "compile_time_limit_s": req.compile_timeout,
        "mode": "raw",
    }
    if req.memory_limit_MB > 0:
        payload["memory_limit_mb"] = req.memory_limit_MB
    files = {k: v for k, v in req.files.items() if v is not None}
    if files:
        payload["files"] = files
    if req.fetch_files:
        payload["fetch_files"] = list(req.fetch_files)
    return payload


def check_run_code_files(req: RunCodeRequest) -> None:
    """``files`` are relative paths (nested directories allowed, as SandboxFusion writes them)
    holding base64; ``fetch_files`` are relative or absolute paths as the program sees them.
    ``..``, absolute ``files`` and the like are a 422 naming the entry (``judge.check_file_path``)."""
    checks: list[tuple[str, list[str], bool]] = [("files", list(req.files), False)]
    checks.append(("fetch_files", list(req.fetch_files), True))
    for field, names, absolute in checks:
        for name in names:
            try:
                check_file_path(name, field, absolute=absolute)
            except InvalidPayload as e:
                raise ApiError(
                    422, "invalid_field", f"{field}: {e.message}", field=field, entry=name
                ) from None
    try:
        check_no_clash([n for n, v in req.files.items() if v is not None])
    except InvalidPayload as e:
        raise ApiError(422, "invalid_field", f"files: {e.message}", field="files") from None
    for name, content in req.files.items():
        if content is None:
            continue
        try:
            base64.b64decode(content.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise ApiError(
                422, "invalid_field", f"files: {name!r} is not valid base64", field="files", entry=name
            ) from None


def _first_case(detail: dict[str, Any]) -> dict[str, Any]:
    tests = detail.get("tests")
    if isinstance(tests, list) and tests and isinstance(tests[0], dict):
        return tests[0]
    return {}


def _return_code(reason: Any) -> int:
    m = re.search(r"(?:exit(?:ed)?(?: with)?(?: code| status)?|code)\s*(-?\d+)", str(reason or ""))
    if m:
        return int(m.group(1))
    m = re.search(r"signal\s*(\d+)", str(reason or ""))
    return 128 + int(m.group(1)) if m else 1


def _truncation_message(raw: dict[str, Any]) -> str:
    cut = [name for name in ("stdout", "stderr") if raw.get(f"{name}_truncated")]
    if not cut:
        return ""
    what = " and ".join(cut)
    msg = f"{what} truncated to its first {RAW_OUTPUT_BYTES} bytes"
    if raw.get("output_limit"):
        msg += "; the program was stopped for writing past the capture limit"
    return msg


_RUN_CODE_FIELDS = {"time_limit_s": "run_timeout", "compile_time_limit_s": "compile_timeout"}


def cut_message(detail: dict[str, Any]) -> str:
    """What the service cut of the request's time limits, naming the setting that decided it."""
    parts = []
    for c in detail.get("limits_cut") or ():
        if isinstance(c, dict):
            name = _RUN_CODE_FIELDS.get(str(c.get("field")), str(c.get("field")))
            parts.append(
                f"{name} {c.get('requested_s'):g} s was cut to {c.get('effective_s'):g} s by {c.get('setting')}"
            )
    return "; ".join(parts)


def to_run_code_response(result: Result, compiled: bool) -> RunCodeResponse:
    """:func:`map_run_code_result`, with any cut of the request's time limits said in ``message``
    (SandboxFusion runs the program for the time the client asked; here the operator's ceiling
    applies, and the response must not hide that)."""
    resp = map_run_code_result(result, compiled)
    cut = cut_message(result.detail)
    if cut and resp.status != "SandboxError":
        resp.message = f"{resp.message}; {cut}" if resp.message else cut
    return resp


def map_run_code_result(result: Result, compiled: bool) -> RunCodeResponse:
    """Map a judged result to SandboxFusion's response.

    ``compiled``: the language has a compile step (a ``compile_result`` is reported for it).
    Status and message follow SandboxFusion's ``parse_run_status``: ``Success`` when every step
    finished with return code 0, else ``Failed``, with an empty message; ``SandboxError`` with a
    message when the service itself failed. Unlike SandboxFusion, output cut at its 1 MiB limit
    is reported in ``message`` (never a silent ``Success``).
    """
    d = result.detail
    status = result.status
    files = {str(k): str(v) for k, v in (d.get("files") or {}).items()}
    ok_compile = (
        CommandRunResult(status="Finished", return_code=0, stdout="", stderr="") if compiled else None
    )
    if status is Status.COMPILE_ERROR:
        out = str(d.get("compiler_output", ""))
        if not compiled:  # an interpreter refusing the source: SandboxFusion reports the run
            run = CommandRunResult(status="Finished", return_code=1, stdout="", stderr=out)
            return RunCodeResponse(status="Failed", run_result=run, files=files)
        comp = CommandRunResult(status="Finished", return_code=1, stdout="", stderr=out)
        return RunCodeResponse(status="Failed", compile_result=comp, files=files)
    if status is Status.TIMEOUT and d.get("stage") == "compile":
        comp = CommandRunResult(status="TimeLimitExceeded", stderr=str(d.get("compiler_output", "")))
        return RunCodeResponse(status="Failed", compile_result=comp, files=files)
    if status in (Status.INTERNAL_ERROR, Status.INVALID):
        err = d.get("error")
        return RunCodeResponse(status="SandboxError", message=f"{status.value}: {err or d.get('reason', '')}")
    raw = d.get("run")
    case = _first_case(d)
    message = ""
    if isinstance(raw, dict):  # a raw run: full output from the handler
        exec_time = raw.get("execution_time")
        timed_out = bool(raw.get("timed_out"))
        run = CommandRunResult(
            status="TimeLimitExceeded" if timed_out else "Finished",
            execution_time=float(exec_time) if exec_time is not None else None,
            return_code=None if timed_out else raw.get("return_code"),
            stdout=str(raw.get("stdout") or ""),
            stderr=str(raw.get("stderr") or ""),
        )
        message = _truncation_message(raw)
    else:
        t = case.get("time_s")
        exec_time = float(t) if isinstance(t, (int, float)) else None
        if status is Status.TIMEOUT:
            run = CommandRunResult(status="TimeLimitExceeded", execution_time=exec_time, stdout="", stderr="")
        elif status is Status.OK or status is Status.WRONG_ANSWER:
            run = CommandRunResult(
                status="Finished",
                execution_time=exec_time,
                return_code=0,
                stdout=str(case.get("stdout") or "") if status is Status.WRONG_ANSWER else "",
                stderr="",
            )
        else:  # runtime_error, memory_limit_exceeded: the program ended with an error
            run = CommandRunResult(
                status="Finished",
                execution_time=exec_time,
                return_code=_return_code(case.get("reason")),
                stdout=str(case.get("stdout") or ""),
                stderr=str(case.get("stderr") or case.get("reason") or ""),
            )
    success = (
        run.status == "Finished"
        and run.return_code == 0
        and not (isinstance(raw, dict) and raw.get("output_limit"))
    )
    return RunCodeResponse(
        status="Success" if success else "Failed",
        message=message,
        compile_result=ok_compile,
        run_result=run,
        files=files,
    )


@router.post("/run_code", response_model=RunCodeResponse, openapi_extra=json_body.body_doc(RunCodeRequest))
async def run_code(
    request: Request,
    who: Principal = Depends(compat_principal),
    st: AppState = Depends(get_state),
    x_distrs_task: str | None = Header(None),
    x_distrs_batch: str | None = Header(None),
    x_distrs_timeout: str | None = Header(None),
) -> JSONResponse:
    """SandboxFusion-compatible single run in any language of languages.yaml (cuda with GPU workers)."""
    body = await json_body.read(request, RunCodeRequest)
    found = run_code_language(body.language, st.table.reward_types)
    if found is None:
        served = served_languages(st.table.reward_types)
        raise ApiError(
            422,
            "unsupported_language",
            f"language: {body.language!r} is not supported; supported: {', '.join(served)}",
            field="language",
        )
    rt, compiled = found
    check_run_code_files(body)
    task = _header_id(x_distrs_task, "X-DistRS-Task", _default_task("sandboxfusion", who))
    payload = run_code_payload(body)
    # Without X-DistRS-Batch the batch id is the request's content: verl retries a 504 with the
    # same body, and the retry then waits on the first attempt's run instead of starting another.
    batch_id = _header_id(x_distrs_batch, "X-DistRS-Batch", "rc-" + _hash([rt, payload]))
    # verl gives each call compile_timeout + run_timeout + 10 s; answer (504 at worst) before that.
    own = body.compile_timeout + body.run_timeout + RUN_CODE_MARGIN_S
    wait_s = _wait_s(x_distrs_timeout, st) if x_distrs_timeout else min(st.settings.compat_wait_s, own)
    limit = st.settings.run_code_max_payload_bytes
    (result,) = await run_batch(st, who, task, batch_id, [(rt, payload)], wait_s, payload_limit=limit)
    return JSONResponse(to_run_code_response(result, compiled).model_dump(mode="json"))


# ---------------------------------------------------------------- OpenRLHF /get_reward


class GetRewardRequest(BaseModel):
    """OpenRLHF's remote reward request: full texts (prompt + response), prompts, labels."""

    model_config = ConfigDict(extra="ignore")

    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


# OpenRLHF 0.11 (openrlhf/utils/agent.py, SingleTurnAgentExecutor._fetch_rewards_via_http) gives
# each POST 180 s in total and retries any failure 5 times after 1 s. Answering a 504 before its
# client gives up lets the retry reattach to the same batch (see _content_id).
OPENRLHF_CLIENT_TIMEOUT_S = 180.0
OPENRLHF_WAIT_S = OPENRLHF_CLIENT_TIMEOUT_S - 10.0


def _content_id(reward_type: str, body: GetRewardRequest) -> str:
    return _hash([reward_type, body.query, body.prompts, body.labels])


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE)


def reward_payload(reward_type: str, response: str, label: Any) -> dict[str, Any]:
    """Payload for one OpenRLHF sample: math judges the whole response against the label; a
    judged code type runs the response's last fenced block against the label's tests
    (``[{stdin, expected_stdout}]`` or ``{"inputs": [...], "outputs": [...]}``, maybe as JSON)."""
    if reward_type in ("cpp", "python", "cuda"):
        tests: Any = label
        if isinstance(tests, str):
            try:
                tests = json.loads(tests)
            except ValueError:
                tests = []
        if isinstance(tests, dict) and "inputs" in tests and "outputs" in tests:
            tests = [
                {"stdin": str(i), "expected_stdout": str(o)}
                for i, o in zip(tests["inputs"], tests["outputs"], strict=False)
            ]
        blocks = _FENCE.findall(response)
        code = blocks[-1][1] if blocks else response
        return {"code": code, "tests": tests if isinstance(tests, list) else []}
    if reward_type == "math":
        return {"completion": response, "ground_truth": "" if label is None else str(label)}
    return {"completion": response, "label": label}


@router.post("/get_reward", openapi_extra=json_body.body_doc(GetRewardRequest))
async def get_reward(
    request: Request,
    who: Principal = Depends(compat_principal),
    st: AppState = Depends(get_state),
    x_distrs_task: str | None = Header(None),
    x_distrs_batch: str | None = Header(None),
    x_distrs_timeout: str | None = Header(None),
    x_distrs_reward_type: str | None = Header(None),
) -> JSONResponse:
    """OpenRLHF-compatible remote reward: one batch per call, rewards in query order."""
    raw = json_body.loads(await request.body())
    if (
        isinstance(raw, dict)
        and isinstance(raw.get("query"), list)
        and len(raw["query"]) > st.settings.max_bulk
    ):
        raise too_many("query", len(raw["query"]), st.settings.max_bulk)  # before validating rows
    body = json_body.parse_value(raw, GetRewardRequest)
    n = len(body.query)
    for name, col in (("prompts", body.prompts), ("labels", body.labels)):
        if col is not None and len(col) != n:
            raise ApiError(422, "length_mismatch", f"{name}: {len(col)} items but query has {n}", field=name)
    rt = x_distrs_reward_type or st.settings.compat_reward_type
    if rt not in st.table.reward_types:
        raise ApiError(
            422,
            "unknown_reward_type",
            f"X-DistRS-Reward-Type: {rt!r} is not served; known: {', '.join(sorted(st.table.reward_types))}",
            field="X-DistRS-Reward-Type",
        )
    if n == 0:
        return JSONResponse({"rewards": [], "scores": [], "extra_logs": {}})
    if body.prompts is None:
        raise ApiError(
            422,
            "missing_field",
            "prompts: required, so that only the response part of each query is graded",
            field="prompts",
        )
    labels = body.labels or [None] * n
    items = []
    rows: list[int] = []  # query index of each item; a row whose prompt is not found has none
    for i, (q, p, lab) in enumerate(zip(body.query, body.prompts, labels, strict=True)):
        try:
            response = split_response(q, p)
        except SplitError:
            continue
        rows.append(i)
        items.append((rt, reward_payload(rt, response, lab)))
    task = _header_id(x_distrs_task, "X-DistRS-Task", _default_task("openrlhf", who))
    # Without X-DistRS-Batch the batch id is the call's content: OpenRLHF retries a timed-out call
    # with the same body, and the retry then waits on the first call's batch instead of running
    # it again (scores are a function of the content).
    batch_id = _header_id(x_distrs_batch, "X-DistRS-Batch", "gr-" + _content_id(rt, body))
    wait_s = (
        _wait_s(x_distrs_timeout, st) if x_distrs_timeout else min(st.settings.compat_wait_s, OPENRLHF_WAIT_S)
    )
    found = await run_batch(st, who, task, batch_id, items, wait_s, "query") if items else []
    results: list[Result | None] = [None] * n
    for i, r in zip(rows, found, strict=True):
        results[i] = r
    rewards = [float(r.score) if r is not None else 0.0 for r in results]
    extra_logs = {
        "distrs_ok": [1.0 if r is not None and r.status is Status.OK else 0.0 for r in results],
        "distrs_internal_error": [
            1.0 if r is not None and r.status is Status.INTERNAL_ERROR else 0.0 for r in results
        ],
        # 1.0: no part of the prompt was found in the query, so nothing was graded (reward 0)
        "distrs_prompt_not_found": [1.0 if r is None else 0.0 for r in results],
    }
    return JSONResponse({"rewards": rewards, "scores": rewards, "extra_logs": extra_logs})
