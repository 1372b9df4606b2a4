"""Faults are never a score: how the framework adapters treat ``internal_error``.

``internal_error`` means the service failed (a sandbox that could not start, a worker that died
past ``max_attempts``, a checker that crashed) - it says nothing about the completion. Scoring it
0 would teach the policy that a right answer was wrong, so every adapter:

1. retries the requests that ended ``internal_error`` as a fresh batch (new request ids: an id
   that ended is never run again), up to ``retries`` more times, logging the cause once per call;
2. then, where the framework can mark a sample as unscored, marks it (TRL: ``None``; verl:
   ``on_fault="mark"`` returns verl's dict with ``distrs_fault``); where it cannot, raises
   :class:`~distrs_client.errors.RewardFaultError` naming the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from distrs_client.models import RewardResult

log = logging.getLogger("distrs_client.adapters")

#: Extra attempts for requests that ended ``internal_error``.
FAULT_RETRIES = 2
FAULT = "internal_error"

Items = list[tuple[str, dict[str, Any]]]


def fault_cause(results: Sequence[RewardResult]) -> str:
    """The service's reason for the first faulted result (its ``detail.error`` or ``reason``)."""
    for r in results:
        if r.status == FAULT:
            err = r.detail.get("error") or r.detail.get("reason") or "no reason given"
            return str(err)[:300]
    return ""


def _faulted(results: Sequence[RewardResult]) -> list[int]:
    return [i for i, r in enumerate(results) if r.status == FAULT]


def _note(results: Sequence[RewardResult], task: str, batch_id: str, retries: int) -> None:
    bad = _faulted(results)
    log.warning(
        "DistRS: %d of %d requests of %s/%s ended internal_error (%s); retrying them up to %d times",
        len(bad),
        len(results),
        task,
        batch_id,
        fault_cause(results),
        retries,
    )


def score_retrying(
    score_many: Callable[[Items, str], list[RewardResult]],
    items: Items,
    batch_id: str,
    *,
    task: str,
    retries: int = FAULT_RETRIES,
) -> tuple[list[RewardResult], int]:
    """Score ``items`` as batch ``batch_id``; re-score the ones that ended ``internal_error`` as
    batches ``{batch_id}-f1``, ``-f2``, ... up to ``retries`` times. (results, attempts made)."""
    results = list(score_many(items, batch_id))
    attempts = 1
    if _faulted(results) and retries > 0:
        _note(results, task, batch_id, retries)
    while (bad := _faulted(results)) and attempts <= retries:
        again = score_many([items[i] for i in bad], f"{batch_id}-f{attempts}")
        attempts += 1
        for i, r in zip(bad, again, strict=True):
            results[i] = r
    return results, attempts


async def ascore_retrying(
    score_many: Callable[[Items, str], Awaitable[list[RewardResult]]],
    items: Items,
    batch_id: str,
    *,
    task: str,
    retries: int = FAULT_RETRIES,
) -> tuple[list[RewardResult], int]:
    """:func:`score_retrying` for the asynchronous client."""
    results = list(await score_many(items, batch_id))
    attempts = 1
    if _faulted(results) and retries > 0:
        _note(results, task, batch_id, retries)
    while (bad := _faulted(results)) and attempts <= retries:
        again = await score_many([items[i] for i in bad], f"{batch_id}-f{attempts}")
        attempts += 1
        for i, r in zip(bad, again, strict=True):
            results[i] = r
    return results, attempts
