"""One error body for every failure: ``{"error": {"code", "message", "details"}}``.

Validation errors name the offending field(s); store errors carry their own status and code.
Whenever the store cannot be reached (``Unavailable``, or a connection-level error the store did
not translate) the answer is 503 with ``Retry-After``, never 500: the call did nothing and may be
retried as is (submission is idempotent). Anything else unexpected is a 500 with no internals
leaked (and is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from distrs.proxy.responses import JSONResponse
from distrs.store.errors import StoreError, Unavailable

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def from_errors(errs: Sequence[Any]) -> ApiError:
    """Pydantic/FastAPI validation errors as one ApiError: 400 for malformed JSON, else a 422
    whose message names the first offending field (and how many more there are)."""
    fields = [
        {"field": _loc(e.get("loc", ())), "problem": e.get("msg", ""), "type": e.get("type")} for e in errs
    ]
    if any(e.get("type") == "json_invalid" for e in errs):
        return ApiError(400, "malformed_json", "request body is not valid JSON", errors=fields)
    first = fields[0] if fields else {"field": "body", "problem": "invalid"}
    msg = f"{first['field']}: {first['problem']}" + (
        f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    )
    return ApiError(422, "invalid_request", msg, errors=fields)


def invalid(exc: ValidationError) -> ApiError:
    return from_errors(exc.errors())


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def _connection_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "the store could not be reached" (redis-py's when installed)."""
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from redis import exceptions as rx

        types += [rx.ConnectionError, rx.TimeoutError, rx.BusyLoadingError]
    except ImportError:  # pragma: no cover - redis is a dependency; the memory store needs none
        pass
    return tuple(types)


def unavailable(retry_after_s: int, message: str = "the store is unavailable; retry") -> JSONResponse:
    return JSONResponse(
        error_body(Unavailable.code, message, {"retry_after_s": retry_after_s}),
        status_code=503,
        headers={"Retry-After": str(retry_after_s)},
    )


def install(app: FastAPI, retry_after_s: int = 2) -> None:
    connection_errors = _connection_errors()

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        retry = exc.details.get("retry_after_s")  # a 429 or 503 that says when to come back
        headers = {"Retry-After": str(retry)} if retry is not None else None
        return JSONResponse(
            error_body(exc.code, exc.message, exc.details), status_code=exc.status, headers=headers
        )

    @app.exception_handler(StoreError)
    async def _store(_: Request, exc: StoreError) -> JSONResponse:
        if exc.status == 503:
            log.warning("store unavailable: %s", exc.message)
            return unavailable(retry_after_s, exc.message)
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = from_errors(exc.errors())
        return JSONResponse(error_body(err.code, err.message, err.details), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, connection_errors):
            log.warning("store unreachable: %r", exc)
            return unavailable(retry_after_s)
        log.exception("unhandled error")
        return JSONResponse(error_body("internal_error", "internal error; see proxy logs"), 500)
