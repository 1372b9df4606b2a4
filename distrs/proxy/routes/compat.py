"""Drop-in endpoints for trainers that already speak another reward protocol: what they share.

* SandboxFusion ``POST /run_code`` (``sandboxfusion.py``), what verl's sandbox integration calls
  per test case;
* OpenRLHF ``POST /get_reward`` (``openrlhf.py``), the remote reward model protocol;
* slime ``POST /slime/reward`` (``slime.py``).

All go through exactly the pipelines ``/v1/requests`` uses: the call registers a batch, submits
its requests to the store (so EBF queues, the planner and history all see them) and waits for the
batch's results (``run_batch``). Bodies are read like every other route's (``proxy/body.py``:
orjson, lone surrogates refused naming the field) and held to the same limits: rows count
against ``max_bulk`` and each row's payload against ``max_payload_bytes``. Optional headers:
``X-DistRS-Task`` (like every task it belongs to the caller's tenant, so another tenant cannot
take it), ``X-DistRS-Batch`` (the batch id; give the same id when retrying a call and the retry
returns the first call's results instead of running anything twice), ``X-DistRS-Timeout``
(seconds to wait, at most ``compat_wait_s``).

Neither framework's client sends credentials, so besides ``Authorization: Bearer`` these routes
accept the trainer token as a ``?token=`` query parameter (it is part of the URL both frameworks
let you configure; ``compat_principal``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Header, Query, Request

from distrs.core.model import BatchInfo, Result, Status
from distrs.proxy import quotas
from distrs.proxy.auth import INSECURE, Principal, Role
from distrs.proxy.deps import AppState, act_as, get_state
from distrs.proxy.errors import ApiError
from distrs.proxy.routes.trainer import check_payload, too_many
from distrs.proxy.schemas import ID_PATTERN, ID_RULE
from distrs.rewards.routing import route
from distrs.store.base import NewRequest

log = logging.getLogger(__name__)

_ID = re.compile(ID_PATTERN)


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


@dataclass
class CompatCall:
    """What every drop-in route takes besides its body: the call, its caller, the app's state
    and the optional headers (module docstring)."""

    request: Request
    who: Principal
    st: AppState
    task: str | None
    batch: str | None
    timeout: str | None


async def compat_call(
    request: Request,
    who: Principal = Depends(compat_principal),
    st: AppState = Depends(get_state),
    x_distrs_task: str | None = Header(None),
    x_distrs_batch: str | None = Header(None),
    x_distrs_timeout: str | None = Header(None),
) -> CompatCall:
    return CompatCall(request, who, st, x_distrs_task, x_distrs_batch, x_distrs_timeout)


def header_id(value: str | None, name: str, default: str) -> str:
    if value is None or value == "":
        return default
    if not _ID.match(value):
        raise ApiError(422, "invalid_header", f"{name}: must be {ID_RULE}", field=name)
    return value


def default_task(base: str, who: Principal) -> str:
    """The default task of a compat route. Every task is the caller's tenant's (``run_batch``
    scopes it), so each tenant has its own ``base`` task and no other tenant can claim it."""
    del who  # scoping happens in run_batch, for default and X-DistRS-Task names alike
    return base


def compat_wait(value: str | None, st: AppState) -> float:
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


def content_hash(value: Any) -> str:
    """A stable id of ``value`` (a retried call's batch id is its content's)."""
    blob = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


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
