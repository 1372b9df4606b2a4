"""SandboxFusion ``POST /run_code``: what verl's sandbox integration calls per test case.

Run one program (any language of ``distrs/core/languages.yaml``, by its name or SandboxFusion's;
``cuda`` where the service has GPU workers) on ``stdin`` with ``files``/``fetch_files`` and
``memory_limit_MB``, and return SandboxFusion's response with its status and message rules
(``status`` Success|Failed|SandboxError, ``compile_result``, ``run_result`` with ``status``
Finished|Error|TimeLimitExceeded, ``files``); output is kept up to SandboxFusion's 1 MiB per
stream and any cut is said in ``message``. The wait ends before verl's own request timeout
(``compile_timeout + run_timeout + 10`` s) and the batch id is derived from the request, so
verl's retry of a 504 reattaches to the first attempt's run.

It is served by the judged handlers: the program runs as one test case with ``"mode": "raw"``,
so the handler reports the run itself (``detail["run"]``: ``stdout``/``stderr`` up to 1 MiB with
truncation flags, ``return_code``, whether it timed out or hit the output cap) and the fetched
files (``detail["files"]``). Registration, submission, the wait and the headers are the other
drop-in routes' (``compat.py``).
"""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from distrs.core.languages import find_language, language_reward_type, language_table
from distrs.core.model import Result, Status
from distrs.proxy import body as json_body
from distrs.proxy.errors import ApiError
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes import compat
from distrs.proxy.routes.compat import CompatCall, compat_call
from distrs.rewards.judge import RAW_OUTPUT_BYTES, InvalidPayload, check_file_path, check_no_clash

router = APIRouter(tags=["compat"])

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


RUN_CODE_MARGIN_S = 5.0


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
async def run_code(call: CompatCall = Depends(compat_call)) -> JSONResponse:
    """SandboxFusion-compatible single run in any language of languages.yaml (cuda with GPU workers)."""
    st, who = call.st, call.who
    body = await json_body.read(call.request, RunCodeRequest)
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
    task = compat.header_id(call.task, "X-DistRS-Task", compat.default_task("sandboxfusion", who))
    payload = run_code_payload(body)
    # Without X-DistRS-Batch the batch id is the request's content: verl retries a 504 with the
    # same body, and the retry then waits on the first attempt's run instead of starting another.
    batch_id = compat.header_id(call.batch, "X-DistRS-Batch", "rc-" + compat.content_hash([rt, payload]))
    # verl gives each call compile_timeout + run_timeout + 10 s; answer (504 at worst) before that.
    own = body.compile_timeout + body.run_timeout + RUN_CODE_MARGIN_S
    wait_s = compat.compat_wait(call.timeout, st) if call.timeout else min(st.settings.compat_wait_s, own)
    limit = st.settings.run_code_max_payload_bytes
    (result,) = await compat.run_batch(st, who, task, batch_id, [(rt, payload)], wait_s, payload_limit=limit)
    return JSONResponse(to_run_code_response(result, compiled).model_dump(mode="json"))
