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
per-sample ``extra_info["reward_type"]`` or a type named in ``data_source`` wins), ``task`` and
``timeout``. A service-side failure (``internal_error``) scores 0.0 here because verl needs a
number.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from distrs_client.adapters.common import payload_for, reward_type_for
from distrs_client.shared import shared_async_client, shared_client


class _Options(NamedTuple):
    url: str | None
    token: str | None
    default_type: str
    task: str
    timeout: float | None


def _opts(kwargs: dict[str, Any]) -> _Options:
    return _Options(
        kwargs.get("distrs_url"),
        kwargs.get("distrs_token"),
        str(kwargs.get("reward_type") or "math"),
        str(kwargs.get("task") or "verl"),
        kwargs.get("timeout"),
    )


def _sample(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None,
    kwargs: dict[str, Any],
) -> tuple[_Options, str, dict[str, Any]]:
    """The options of a per-sample call and the ``(reward_type, payload)`` of its sample."""
    opts = _opts(kwargs)
    rt = reward_type_for(data_source, extra_info, opts.default_type)
    return opts, rt, payload_for(rt, solution_str, ground_truth, extra_info)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """verl per-sample reward function."""
    opts, rt, payload = _sample(data_source, solution_str, ground_truth, extra_info, kwargs)
    client = shared_client(opts.url, opts.token)
    return client.score(rt, payload, task=opts.task, timeout=opts.timeout).score


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> float:
    """verl per-sample reward function for the asynchronous reward loop."""
    opts, rt, payload = _sample(data_source, solution_str, ground_truth, extra_info, kwargs)
    client = shared_async_client(opts.url, opts.token)
    return (await client.score(rt, payload, task=opts.task, timeout=opts.timeout)).score


def compute_score_batch(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[dict[str, Any] | None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """verl ``BatchRewardManager`` reward function: the whole step's samples as one DistRS batch."""
    url, token, default_type, task, timeout = _opts(kwargs)
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    items = []
    for src, sol, gt, info in zip(data_sources, solution_strs, ground_truths, infos, strict=True):
        rt = reward_type_for(src, info, default_type)
        items.append((rt, payload_for(rt, sol, gt, info)))
    batch_id = str(kwargs.get("batch_id") or uuid.uuid4().hex)
    results = shared_client(url, token).score_many(items, task=task, batch_id=batch_id, timeout=timeout)
    return [r.score for r in results]
