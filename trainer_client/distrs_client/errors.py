"""Exceptions raised by the DistRS client.

Every error derives from :class:`DistrsError`. HTTP errors carry the service's error body
(``{"error": {"code", "message", "details"}}``) so callers can branch on ``code`` rather than on
message text. Transient failures (connection errors, 5xx, 429) are retried inside the client;
what reaches the caller has already exhausted the retry budget.
"""

from __future__ import annotations

from typing import Any


class DistrsError(Exception):
    """Base class of every error this package raises."""


class ClientClosedError(DistrsError):
    """The client was closed; create a new one."""


class ServiceUnavailableError(DistrsError):
    """The service could not be reached (connection refused/reset, timeout) within the retry budget."""


class APIError(DistrsError):
    """The service answered with an error status.

    ``status`` is the HTTP status, ``code`` the service's stable error code (e.g. ``unknown_batch``,
    ``batch_full``), ``details`` its structured details (often naming the offending field).
    """

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


class BadRequestError(APIError):
    """400, 413 or 422: the request was malformed; ``details`` names the field."""


class AuthenticationError(APIError):
    """401: missing or unknown token."""


class PermissionDeniedError(APIError):
    """403: the token's role or tenant does not allow this call."""


class NotFoundError(APIError):
    """404: unknown batch, request or route."""


class SessionGoneError(APIError):
    """410: the session ended (``code``: ``session_expired``, ``session_lost``,
    ``session_limit_exceeded``, ``session_create_failed``); its state is gone."""


class ConflictError(APIError):
    """409: e.g. a batch re-registered with another size, or a batch already full."""


class RateLimitedError(APIError):
    """429 after the retry budget was spent."""


class ServerError(APIError):
    """5xx after the retry budget was spent."""


class ResultsTimeoutError(DistrsError, TimeoutError):
    """``results()`` ran out of time; ``partial`` holds the results that had arrived, in order."""

    def __init__(self, task: str, batch_id: str, done: int, expected: int | None, partial: list[Any]) -> None:
        exp = "?" if expected is None else str(expected)
        super().__init__(f"batch {task}/{batch_id}: {done}/{exp} results before the timeout")
        self.task = task
        self.batch_id = batch_id
        self.partial = partial


class RewardFaultError(DistrsError):
    """The service failed to score some requests (``internal_error``: a sandbox or worker fault,
    not the model's) even after the adapter's retries. Raised where a framework cannot mark a
    sample as unscored, so a fault never becomes a reward of 0. ``results`` holds every result of
    the call (the faulted ones with ``status == "internal_error"``), ``cause`` the service's reason."""

    def __init__(self, results: list[Any], cause: str, attempts: int) -> None:
        bad = sum(1 for r in results if getattr(r, "status", None) == "internal_error")
        super().__init__(
            f"{bad} of {len(results)} reward requests ended internal_error after {attempts} attempts "
            f"(a service fault, not the model's): {cause}"
        )
        self.results = results
        self.cause = cause
        self.attempts = attempts


# How the client reacts to what reached it after retries, by group:
# the service may have lost state it held for us (re-submit from the local copies) ...
STATE_LOSS_ERRORS: tuple[type[DistrsError], ...] = (ServiceUnavailableError, ServerError)
# ... it refused a request as malformed (isolate it as an ``invalid`` result) ...
REJECTED_ERRORS: tuple[type[APIError], ...] = (BadRequestError, ConflictError)
# ... or it refused the caller (fatal for the batch).
ACCESS_ERRORS: tuple[type[APIError], ...] = (AuthenticationError, PermissionDeniedError)


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: SessionGoneError,
    413: BadRequestError,
    422: BadRequestError,
    429: RateLimitedError,
}


def api_error(status: int, body: Any) -> APIError:
    """Build the matching :class:`APIError` subclass from a status and a decoded error body."""
    code, message, details = "http_error", f"HTTP {status}", {}
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            code = str(err.get("code") or code)
            message = str(err.get("message") or message)
            raw = err.get("details")
            details = raw if isinstance(raw, dict) else {}
        elif "detail" in body:  # framework default error shape
            message = str(body["detail"])
    elif isinstance(body, str) and body:
        message = body[:500]
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(status, code, message, details)
