"""One way to read a JSON request body, for native and compatibility routes alike.

Bodies are parsed with orjson (fast, strict UTF-8). orjson refuses a string holding a lone UTF-16
surrogate (``"\\ud800"``), which Python's own ``json`` would accept and which no JSON encoder can
write back out: such a payload would be queued and only fail when a worker's lease is rendered.
So when orjson refuses a body, the body is parsed again with the standard library to tell a
malformed body (400) from a well-formed one holding a lone surrogate (422 naming the field, e.g.
``requests.3.payload.code``). Either way nothing reaches the store. Worker routes read their
bodies here too, so a lease call, heartbeat or completion gets the same answers.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from distrs.proxy.errors import ApiError, invalid

M = TypeVar("M", bound=BaseModel)
_MAX_DEPTH = 64


def _has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def surrogate_path(value: Any, path: str = "", depth: int = 0) -> str | None:
    """Dotted path of the first string (key or value) in ``value`` holding a lone surrogate."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return (path or "body") if _has_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            if _has_surrogate(k):
                return path or "body"
            found = surrogate_path(v, here, depth + 1)
            if found is not None:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = surrogate_path(v, f"{path}.{i}" if path else str(i), depth + 1)
            if found is not None:
                return found
    return None


def loads(raw: bytes) -> Any:
    """The JSON value of ``raw``: 400 ``malformed_json`` or 422 ``invalid_string`` on failure."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        reason = str(exc)
    malformed = ApiError(400, "malformed_json", f"request body is not valid JSON: {reason}")
    try:
        # UTF-8 only (RFC 8259 §8.1): ``json.loads`` of bytes would also guess UTF-16/32, and
        # it accepts what orjson rightly refuses (``NaN``, ``1e400``): only a lone surrogate
        # it finds makes the refusal a 422.
        lenient = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        raise malformed from None
    where = surrogate_path(lenient)
    if where is None:
        raise malformed
    raise ApiError(
        422,
        "invalid_string",
        f"{where}: contains a lone UTF-16 surrogate (not valid Unicode text)",
        field=where,
    )


def parse(raw: bytes, model: type[M]) -> M:
    """``raw`` as ``model``: the errors of ``loads``, or 422 naming the invalid field."""
    return parse_value(loads(raw), model)


def parse_value(data: Any, model: type[M]) -> M:
    """Parsed JSON ``data`` as ``model``, or 422 naming the invalid field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc) from None


async def raw(request: Request) -> bytes:
    """The request's whole body, read as ``Request.body()`` reads it (``ClientDisconnect`` if the
    client goes away first) but straight from the ASGI messages: Starlette's reader costs a
    generator, a context manager and a weak set per call, and a hot route's body is one message.
    The body is kept on the request, so a later ``request.body()`` answers it."""
    got: bytes | None = getattr(request, "_body", None)
    if got is not None:
        return got
    receive = request.receive
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] == "http.request":
            chunk = msg.get("body", b"")
            if chunk:
                chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        elif msg["type"] == "http.disconnect":
            raise ClientDisconnect()
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request._body = body
    return body


async def read(request: Request, model: type[M]) -> M:
    return parse(await raw(request), model)


def body_doc(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting a body read by ``read`` (one model, or any of several)."""
    schemas = [m.model_json_schema(ref_template="#/components/schemas/{model}") for m in models]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
