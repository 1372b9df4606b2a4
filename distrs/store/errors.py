"""Store errors. Each carries the HTTP status and a stable code the proxy maps to its error body."""

from __future__ import annotations

from typing import Any


class StoreError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(StoreError):
    status = 404
    code = "not_found"


class UnknownBatch(NotFound):
    code = "unknown_batch"


class UnknownRequest(NotFound):
    code = "unknown_request"


class UnknownLease(NotFound):
    code = "unknown_lease"


class Conflict(StoreError):
    status = 409
    code = "conflict"


class BatchConflict(Conflict):
    code = "batch_conflict"


class BatchFull(Conflict):
    code = "batch_full"


class LeaseExpired(Conflict):
    code = "lease_expired"


class LeaseNotYours(StoreError):
    status = 403
    code = "lease_not_yours"


class Unavailable(StoreError):
    status = 503
    code = "store_unavailable"


class NoNextStage(StoreError):
    """``next`` at the last stage of a request's route: nothing was changed."""

    status = 422
    code = "no_next_stage"
