"""OpenRLHF ``POST /get_reward``: the remote reward model protocol.

``{"query", "prompts", "labels"}`` in, ``{"rewards", "scores", "extra_logs"}`` out, scored with
one reward type (``math`` unless the ``X-DistRS-Reward-Type`` header says otherwise). Only the
response is graded: what follows the prompt inside each query (``rewards/prompt_split.py``: after
leading special tokens, or the prompt's longest end part when it was cut from the left); a row
whose prompt cannot be found at all is never graded whole: its reward is 0 and
``extra_logs["distrs_prompt_not_found"]`` says why, and the rest of the call is scored. The
default wait (170 s) ends before OpenRLHF's own 180 s request timeout, and a call without
``X-DistRS-Batch`` gets a batch id derived from its content, so the client's retry of a timed-out
call waits on the same batch instead of running it again. Registration, submission, the wait and
the headers are the other drop-in routes' (``compat.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header
from pydantic import BaseModel, ConfigDict

from distrs.core.model import Result, Status
from distrs.proxy import body as json_body
from distrs.proxy.errors import ApiError
from distrs.proxy.responses import JSONResponse
from distrs.proxy.routes import compat
from distrs.proxy.routes.compat import CompatCall, compat_call
from distrs.proxy.routes.trainer import too_many
from distrs.rewards.prompt_split import SplitError, split_response

router = APIRouter(tags=["compat"])


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
    return compat.content_hash([reward_type, body.query, body.prompts, body.labels])


def _reward_type_header(x_distrs_reward_type: str | None = Header(None)) -> str | None:
    """The ``X-DistRS-Reward-Type`` header (a dependency, so that it is documented after the
    headers every drop-in route takes)."""
    return x_distrs_reward_type


@router.post("/get_reward", openapi_extra=json_body.body_doc(GetRewardRequest))
async def get_reward(
    call: CompatCall = Depends(compat_call), x_distrs_reward_type: str | None = Depends(_reward_type_header)
) -> JSONResponse:
    """OpenRLHF-compatible remote reward: one batch per call, rewards in query order."""
    st, who = call.st, call.who
    raw = json_body.loads(await call.request.body())
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
        items.append((rt, compat.reward_payload(rt, response, lab)))
    task = compat.header_id(call.task, "X-DistRS-Task", compat.default_task("openrlhf", who))
    # Without X-DistRS-Batch the batch id is the call's content: OpenRLHF retries a timed-out call
    # with the same body, and the retry then waits on the first call's batch instead of running
    # it again (scores are a function of the content).
    batch_id = compat.header_id(call.batch, "X-DistRS-Batch", "gr-" + _content_id(rt, body))
    wait_s = (
        compat.compat_wait(call.timeout, st)
        if call.timeout
        else min(st.settings.compat_wait_s, OPENRLHF_WAIT_S)
    )
    found = await compat.run_batch(st, who, task, batch_id, items, wait_s, "query") if items else []
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
