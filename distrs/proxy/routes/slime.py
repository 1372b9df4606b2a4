"""slime's remote reward protocol: ``POST /slime/reward``.

slime (``--rm-type remote_rm --rm-url URL``, ``slime/rollout/rm_hub/__init__.py``, ``remote_rm``)
posts one ``{"prompt", "response", "label"}`` per sample and keeps the parsed JSON reply as the
sample's reward; with ``--reward-key K`` it reads ``reply[K]``. So the reply is the bare score
when the URL gives no ``reward_key``, else ``{K: score, "status": ..., "detail": ...}``. slime sets
no headers, so everything else is in the URL too: ``?token=``, ``reward_type=`` (default: the
proxy's ``compat_reward_type``), ``reward_key=``, ``task=``.

Only ``response`` is graded (never the prompt); ``label`` is the ground truth, or the tests for a
code type (as for ``/get_reward``). slime (v0.3.1) gives each POST 120 s and retries failures up
to 10 times with exponential backoff: the route answers 504 after 115 s at most, and the batch id
is derived from the body, so a retry waits on the batch the first attempt started instead of
running again.

Faults are never a score: a request that ended ``internal_error`` is run again up to
``compat_fault_retries`` times (``run_batch``); if it still fails the route answers 503
``reward_fault`` naming the cause, so slime retries and then raises instead of training on 0.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict

from distrs.core.model import Status
from distrs.proxy import body as json_body
from distrs.proxy.auth import Principal
from distrs.proxy.deps import AppState, get_state
from distrs.proxy.errors import ApiError
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes.compat import compat_principal, default_task, reward_payload, run_batch
from distrs.proxy.schemas import ID_PATTERN

router = APIRouter(tags=["compat"])

SLIME_CLIENT_TIMEOUT_S = 120.0  # slime's remote_rm session: aiohttp.ClientTimeout(total=120)
SLIME_WAIT_S = SLIME_CLIENT_TIMEOUT_S - 5.0
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ID = re.compile(ID_PATTERN)


class SlimeSample(BaseModel):
    """One slime sample: the prompt (text or chat messages; not graded), the response, the label."""

    model_config = ConfigDict(extra="ignore")

    prompt: Any = None
    response: str
    label: Any = None


def content_batch_id(reward_type: str, body: SlimeSample) -> str:
    """The batch id of a sample: equal bodies (a retry) share one batch."""
    blob = json.dumps([reward_type, body.response, body.label], sort_keys=True, default=str)
    return "sl-" + hashlib.sha256(blob.encode()).hexdigest()[:40]


@router.post("/slime/reward", openapi_extra=json_body.body_doc(SlimeSample))
async def slime_reward(
    request: Request,
    who: Principal = Depends(compat_principal),
    st: AppState = Depends(get_state),
    reward_type: str | None = Query(None, description="Reward type; default the proxy's compat_reward_type."),
    reward_key: str | None = Query(
        None, description="Answer {reward_key: score, ...} instead of a bare score."
    ),
    task: str | None = Query(None, description="Task the requests belong to; default slime."),
) -> JSONResponse:
    """Score one slime sample."""
    body = await json_body.read(request, SlimeSample)
    rt = reward_type or st.settings.compat_reward_type
    if rt not in st.table.reward_types:
        known = ", ".join(sorted(st.table.reward_types))
        raise ApiError(
            422,
            "unknown_reward_type",
            f"reward_type: {rt!r} is not served; known: {known}",
            field="reward_type",
        )
    if reward_key is not None and not _KEY.match(reward_key):
        raise ApiError(422, "invalid_query", f"reward_key: must match {_KEY.pattern}", field="reward_key")
    if task is not None and not _ID.match(task):
        raise ApiError(422, "invalid_query", f"task: must match {_ID.pattern}", field="task")
    batch_id = content_batch_id(rt, body)
    wait_s = min(st.settings.compat_wait_s, SLIME_WAIT_S)
    (result,) = await run_batch(
        st,
        who,
        task or default_task("slime", who),
        batch_id,
        [(rt, reward_payload(rt, body.response, body.label))],
        wait_s,
    )
    if result.status is Status.INTERNAL_ERROR:
        # Never a score: slime keeps whatever this answers as the reward, and has no field that
        # drops a sample. A 503 makes its remote_rm retry and, if the fault persists, raise.
        err = result.detail.get("error") or result.detail.get("reason") or "no reason given"
        raise ApiError(
            503,
            "reward_fault",
            f"the service failed to score this sample (internal_error after "
            f"{st.settings.compat_fault_retries + 1} attempts): {err}",
            batch_id=batch_id,
        )
    score = float(result.score)
    if reward_key is None:
        return JSONResponse(score)
    return JSONResponse({reward_key: score, "status": result.status.value, "detail": result.detail})
