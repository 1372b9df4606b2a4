"""The one place the client touches the network.

:class:`Transport` is a small async Protocol (one HTTP exchange, already-encoded JSON in, decoded
JSON out) so the client's logic - coalescing, retries, re-submission - is tested against a fake
transport, and a trainer can plug in its own (e.g. with mTLS). :class:`HttpxTransport` is the
default, a pooled ``httpx.AsyncClient``. Network failures surface as
:class:`~distrs_client.errors.ServiceUnavailableError`; HTTP error statuses are *returned*, not
raised, because the retry decision belongs to the caller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from distrs_client.errors import ServiceUnavailableError

QueryParams = Mapping[str, str | int | float]


@dataclass(frozen=True)
class Response:
    """An HTTP answer: status, headers (lower-case names) and the decoded JSON body (or text)."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


class Transport(Protocol):
    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: QueryParams | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        """One exchange; raises ServiceUnavailableError when no HTTP answer came back."""
        ...

    async def aclose(self) -> None: ...


def encode_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class HttpxTransport:
    """Pooled HTTP/1.1 transport over ``httpx.AsyncClient`` with bearer-token auth."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        max_connections: int = 16,
        verify: bool | str = True,
    ) -> None:
        headers = {"Accept": "application/json", "User-Agent": "distrs-client/0.1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            verify=verify,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: QueryParams | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        content = None if body is None else encode_json(body)
        headers = {"Content-Type": "application/json"} if content is not None else None
        timeout = httpx.Timeout(timeout_s, connect=self._connect_timeout_s) if timeout_s is not None else None
        try:
            kwargs: dict[str, Any] = {"content": content, "params": params, "headers": headers}
            if timeout is not None:
                kwargs["timeout"] = timeout
            resp = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:  # connect/read errors and timeouts
            raise ServiceUnavailableError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        raw = resp.content
        decoded: Any = None
        if raw:
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = raw.decode(errors="replace")
        return Response(status=resp.status_code, body=decoded, headers=dict(resp.headers))

    async def aclose(self) -> None:
        await self._client.aclose()
