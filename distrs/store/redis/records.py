"""Reading what Redis answers: record hashes as models, and error replies as StoreErrors.

Every failure Redis or redis-py can raise becomes a StoreError (``translate``): a script's own
``DISTRS <code> <json>`` reply the matching exception (HTTP status and the field named); every
other failure (an out-of-memory, read-only, loading or busy reply, a slot moving, an error reply
no script expects) ``Unavailable`` (503): the request itself was not at fault.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from redis.exceptions import (
    AskError,
    ClusterDownError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)

from distrs.core.model import BatchInfo, RequestRecord
from distrs.store import errors

log = logging.getLogger(__name__)

# Script error code -> (exception, message template, the request field it is about).
_ERRORS: dict[str, tuple[type[errors.StoreError], str, str]] = {
    "unknown_task": (errors.UnknownBatch, "task {task!r} not found", "task"),
    "unknown_batch": (
        errors.UnknownBatch,
        "batch {batch_id!r} of task {task!r} is not registered (POST /v1/batches first)",
        "batch_id",
    ),
    "batch_conflict": (
        errors.BatchConflict,
        "batch {batch_id!r} of task {task!r} exists with size {size} and reward_type {reward_type!r}",
        "size",
    ),
    "batch_full": (
        errors.BatchFull,
        "batch {batch_id!r} of task {task!r} already has {size} requests (its declared size)",
        "batch_id",
    ),
    "unknown_lease": (errors.UnknownLease, "lease {lease_id!r} is unknown or already finished", "lease_id"),
    "lease_not_yours": (
        errors.LeaseNotYours,
        "lease {lease_id!r} was taken by another credential",
        "lease_id",
    ),
    "lease_expired": (errors.LeaseExpired, "lease {lease_id!r} expired at {deadline:.3f}", "lease_id"),
    "no_next_stage": (
        errors.NoNextStage,
        "outcome: 'next' at {stage!r}, the last stage of this request",
        "outcome",
    ),
}
# Redis error prefixes that mean "try again later" (out of memory under noeviction, a failover in
# progress, a busy script, a slot moving): answered 503 rather than 500. redis-py's cluster client
# retries MOVED, ASK, TRYAGAIN and CLUSTERDOWN itself first (client.connect_cluster).
_TRANSIENT = {
    "OOM", "READONLY", "MASTERDOWN", "BUSY", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MOVED", "ASK",
}  # fmt: skip
_BATCH_FIELDS = set(BatchInfo.model_fields)
_REQUEST_SCALARS = (
    "tenant",
    "task",
    "batch_id",
    "request_id",
    "reward_type",
    "arrived_at",
    "state",
    "stage",
    "stage_enqueued_at",
    "attempts",
    "seq",
)


def num(x: float) -> str:
    """A float as a script argument (full precision)."""
    return repr(float(x))


def pairs(flat: Sequence[Any]) -> dict[str, str]:
    """``HGETALL``'s flat field, value list as a dict."""
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def translate(exc: ResponseError) -> errors.StoreError:
    """The StoreError for an error reply (module docstring)."""
    text = str(exc)
    if (
        isinstance(exc, OutOfMemoryError | ReadOnlyError | TryAgainError | ClusterDownError | AskError)
        or text.split(" ", 1)[0] in _TRANSIENT
    ):
        return errors.Unavailable(f"redis cannot serve now: {text}")
    if not text.startswith("DISTRS "):
        # an error reply we do not know (a script error, WRONGTYPE from an operator's key): the
        # store cannot serve this call now; the request itself was not at fault
        log.error("redis error reply: %s", text)
        return errors.Unavailable(f"redis cannot serve now: {text}")
    _, code, raw = text.split(" ", 2)
    return script_error(code, raw)


def script_error(code: str, raw: str) -> errors.StoreError:
    """The StoreError for a script's error code and its JSON details."""
    details = orjson.loads(raw) if raw else {}
    if code not in _ERRORS or not isinstance(details, dict):
        return errors.StoreError(f"{code} {raw}")
    cls, template, field = _ERRORS[code]
    try:
        message = template.format(**details)
    except (KeyError, IndexError, ValueError):
        message = code
    return cls(message, field=field)


def batch_from_hash(h: dict[str, str]) -> BatchInfo:
    return BatchInfo.model_validate({k: v for k, v in h.items() if k in _BATCH_FIELDS})


def request_from_hash(h: dict[str, str]) -> RequestRecord:
    data: dict[str, Any] = {k: h[k] for k in _REQUEST_SCALARS if k in h}
    data["payload"] = orjson.loads(h.get("payload") or "{}")
    artifacts = h.get("artifacts")
    data["artifacts"] = orjson.loads(artifacts) if artifacts and artifacts != "{}" else {}
    data["stages"] = orjson.loads(h.get("stages") or "[]")
    # the route's stages with their queue keys; a request of one stage keeps none (submit.lua)
    route = h.get("route")
    data["route"] = [stage for stage, _ in orjson.loads(route)] if route else [h.get("stage", "")]
    if h.get("result"):
        data["result"] = orjson.loads(h["result"])
    return RequestRecord.model_validate(data)
