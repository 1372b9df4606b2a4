"""verl custom reward functions backed by DistRS.

Point verl at this file (``custom_reward_function.path=<this file>``) and pick a function with
``custom_reward_function.name``:

* ``compute_score`` - verl's per-sample signature ``(data_source, solution_str, ground_truth,
  extra_info=None, **kwargs) -> float``; each call is a batch of one (simple, but one round trip per
  sample);
* ``compute_score_async`` - the same as a coroutine for verl's asynchronous reward loop;
* ``compute_score_batch`` - the batch signature of verl's ``BatchRewardManager``
  ``(data_sources, solution_strs, ground_truths, extra_infos, **kwargs) -> list[float]``: one
  DistRS batch per call, which is what the service's batch-level scaling is built for.

``kwargs`` (verl's ``custom_reward_function.reward_kwargs``) may set ``distrs_url``,
``distrs_token`` (else ``DISTRS_URL`` / ``DISTRS_TOKEN``), ``reward_type`` (default ``math``; a
per-sample ``extra_info["reward_type"]`` or a type named in ``data_source`` wins), ``task``,
``timeout``, ``fault_retries`` and ``on_fault``.

Code ground truths are read the way verl's own SandboxFusion path reads them
(``verl/utils/reward_score/sandbox_fusion``, verl 0.9.1), so a run scores the same either way:
``{"inputs", "outputs"}`` (stdin/stdout, compared after trailing newlines), with ``fn_name``
(call-based), or ``{"assert_case": [...]}`` (each assert run after the solution; the score is the
fraction that pass); the score is the fraction of passing cases, over the first 10 only for the
data sources verl scores "continuously" (``codecontests``, ``apps``, ``codeforces``, ``taco``);
a completion without a code block and a malformed ground truth score 0.0 without a round trip,
as in verl.

Faults are never a score (``adapters/faults.py``): a request that ended ``internal_error`` is
retried ``fault_retries`` times (default 2); if it still fails, ``on_fault="raise"`` (default)
raises ``RewardFaultError`` - verl needs a number and 0.0 would teach the policy a right answer
was wrong - and ``on_fault="mark"`` returns verl's dict form for every sample
(``{"score", "distrs_fault"}``; verl logs the extra key per sample, and the faulted sample's score
is 0.0, so filter on it).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from distrs_client.adapters.common import CODE_TYPES, parsed_ground_truth, payload_for, reward_type_for
from distrs_client.adapters.faults import FAULT, FAULT_RETRIES, ascore_retrying, fault_cause, score_retrying
from distrs_client.errors import RewardFaultError
from distrs_client.extract import extract_code
from distrs_client.models import RewardResult
from distrs_client.shared import shared_async_client, shared_client

# verl's default_compute_score scores these data sources with continuous=True: the fraction of
# the first 10 test cases that pass.
CONTINUOUS_SOURCES = ("codecontests", "apps", "codeforces", "taco")
CONTINUOUS_CASES = 10

Score = float | dict[str, float]


class _Options(NamedTuple):
    url: str | None
    token: str | None
    default_type: str
    task: str
    timeout: float | None
    retries: int
    on_fault: str


def _opts(kwargs: dict[str, Any]) -> _Options:
    on_fault = str(kwargs.get("on_fault") or "raise")
    if on_fault not in ("raise", "mark"):
        raise ValueError(f"on_fault: must be 'raise' or 'mark', got {on_fault!r}")
    retries = kwargs.get("fault_retries")
    return _Options(
        kwargs.get("distrs_url"),
        kwargs.get("distrs_token"),
        str(kwargs.get("reward_type") or "math"),
        str(kwargs.get("task") or "verl"),
        kwargs.get("timeout"),
        FAULT_RETRIES if retries is None else int(retries),
        on_fault,
    )


def _test_cases(ground_truth: Any) -> dict[str, Any] | list[Any] | None:
    """The ground truth as verl's SandboxFusion path parses it: a dict (maybe JSON), or our own
    list of ``{stdin, expected_stdout}``; None when it is malformed (verl scores that 0.0)."""
    gt = parsed_ground_truth(ground_truth)
    if isinstance(gt, list):
        return gt
    return gt if isinstance(gt, dict) else None


def verl_code_payload(
    data_source: str, reward_type: str, solution: str, ground_truth: Any, extra: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The payload of a code sample, or None where verl scores 0.0 without running anything."""
    tc = _test_cases(ground_truth)
    if tc is None or not extract_code(solution, reward_type):
        return None
    first = CONTINUOUS_CASES if data_source in CONTINUOUS_SOURCES else None
    if isinstance(tc, list):  # our own shape
        payload = payload_for(reward_type, solution, tc, extra)
        payload["tests"] = payload["tests"][:first]
        return payload if payload["tests"] else None
    asserts = tc.get("assert_case")
    if isinstance(asserts, list):  # verl: each case runs generation + "\n\n" + assert_case[i]
        if not asserts:
            return None
        payload = payload_for(reward_type, solution, [], extra)
        del payload["tests"]
        payload["asserts"] = [str(a) for a in asserts][:first]
        return payload
    inputs, outputs = tc.get("inputs"), tc.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        return None  # verl: invalid structure, or an input/output count mismatch
    if not inputs:
        return None
    payload = payload_for(reward_type, solution, tc, extra)
    payload["tests"] = payload["tests"][:first]
    if "fn_name" not in payload:
        payload.setdefault("compare", "exact")  # verl compares stdout after trailing newlines
    return payload


def _sample(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None,
    kwargs: dict[str, Any],
) -> tuple[_Options, str, dict[str, Any] | None]:
    """The options of a per-sample call and the ``(reward_type, payload)`` of its sample; the
    payload is None where verl scores the sample 0.0 without running it."""
    opts = _opts(kwargs)
    rt = reward_type_for(data_source, extra_info, opts.default_type)
    if rt in CODE_TYPES:
        return opts, rt, verl_code_payload(data_source, rt, solution_str, ground_truth, extra_info)
    return opts, rt, payload_for(rt, solution_str, ground_truth, extra_info)


def _scores(results: list[RewardResult | None], attempts: int, opts: _Options) -> list[Score]:
    """verl's values: floats; a persistent fault raises, or marks every sample (``on_fault``)."""
    done = [r for r in results if r is not None]
    faulted = any(r.status == FAULT for r in done)
    if faulted and opts.on_fault == "raise":
        raise RewardFaultError(done, fault_cause(done), attempts)
    if opts.on_fault == "mark":
        return [
            {"score": 0.0, "distrs_fault": 0.0}
            if r is None
            else {"score": 0.0 if r.status == FAULT else r.score, "distrs_fault": float(r.status == FAULT)}
            for r in results
        ]
    return [0.0 if r is None else r.score for r in results]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Score:
    """verl per-sample reward function."""
    opts, rt, payload = _sample(data_source, solution_str, ground_truth, extra_info, kwargs)
    if payload is None:
        return _scores([None], 1, opts)[0]
    client = shared_client(opts.url, opts.token)
    results, attempts = score_retrying(
        lambda items, bid: client.score_many(items, task=opts.task, batch_id=bid, timeout=opts.timeout),
        [(rt, payload)],
        uuid.uuid4().hex,
        task=opts.task,
        retries=opts.retries,
    )
    return _scores(list(results), attempts, opts)[0]


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Score:
    """verl per-sample reward function for the asynchronous reward loop."""
    opts, rt, payload = _sample(data_source, solution_str, ground_truth, extra_info, kwargs)
    if payload is None:
        return _scores([None], 1, opts)[0]
    client = shared_async_client(opts.url, opts.token)

    async def many(items: list[tuple[str, dict[str, Any]]], bid: str) -> list[RewardResult]:
        return await client.score_many(items, task=opts.task, batch_id=bid, timeout=opts.timeout)

    results, attempts = await ascore_retrying(
        many, [(rt, payload)], uuid.uuid4().hex, task=opts.task, retries=opts.retries
    )
    return _scores(list(results), attempts, opts)[0]


def compute_score_batch(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[dict[str, Any] | None] | None = None,
    **kwargs: Any,
) -> list[Score]:
    """verl ``BatchRewardManager`` reward function: the whole step's samples as one DistRS batch."""
    opts = _opts(kwargs)
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    rows: list[int] = []
    items = []
    for i, (src, sol, gt, info) in enumerate(
        zip(data_sources, solution_strs, ground_truths, infos, strict=True)
    ):
        _, rt, payload = _sample(src, sol, gt, info, kwargs)
        if payload is not None:
            rows.append(i)
            items.append((rt, payload))
    out: list[RewardResult | None] = [None] * len(solution_strs)
    attempts = 1
    if items:
        client = shared_client(opts.url, opts.token)
        batch_id = str(kwargs.get("batch_id") or uuid.uuid4().hex)
        results, attempts = score_retrying(
            lambda its, bid: client.score_many(its, task=opts.task, batch_id=bid, timeout=opts.timeout),
            items,
            batch_id,
            task=opts.task,
            retries=opts.retries,
        )
        for i, r in zip(rows, results, strict=True):
            out[i] = r
    return _scores(out, attempts, opts)
