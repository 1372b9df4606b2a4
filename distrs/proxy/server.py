"""The HTTP server the proxy runs under: one uvicorn configuration for ``distrs proxy`` and
``distrs up``, with the connection limits a service exposed to many tenants needs.

* Body size: ``max_body_bytes``, enforced by the app (``app.BodyLimit``, 413).
* Idle keep-alive connections are closed after ``idle_timeout_s`` (uvicorn's keep-alive timeout).
* Request line + headers are limited to ``max_header_bytes`` and must arrive within
  ``header_timeout_s``. uvicorn's httptools protocol has neither limit: llhttp accumulates a
  header of any size in memory, and every byte received resets the keep-alive timer, so a client
  sending one header byte every few seconds (slowloris) holds a connection forever. The h11
  protocol bounds the header size but has no read timeout either and is markedly slower. So
  ``GuardedHttpTools`` subclasses the httptools protocol: it counts the bytes received before a
  request's headers are complete and answers 431 (and closes) once they exceed the limit, never
  holding more than the limit plus one read; and it arms a timer when a request starts (or the
  connection opens) that answers 408 and closes if the headers are not complete in time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from distrs.config import ProxySettings


def _reply(transport: asyncio.Transport, status: bytes, message: bytes) -> None:
    transport.write(
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(message)).encode() + b"\r\nconnection: close\r\n\r\n" + message
    )
    transport.close()


class GuardedHttpTools(HttpToolsProtocol):
    """httptools protocol with a header size limit and a header read timeout (module docstring)."""

    max_header_bytes = 64 << 10
    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_headers = True
        self._header_bytes = 0
        self._began_in_chunk = False
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._in_headers and not self.transport.is_closing():
            msg = b'{"error": {"code": "header_timeout", "message": "request headers not received in time"}}'
            _reply(self.transport, b"408 Request Timeout", msg)

    def data_received(self, data: bytes) -> None:
        self._began_in_chunk = False
        super().data_received(data)
        if self._in_headers and not self.transport.is_closing():
            if not self._began_in_chunk:  # the part of a chunk before a new request is not its
                self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._disarm()
                msg = (
                    b'{"error": {"code": "headers_too_large", "message": "request line and headers '
                    b"exceed " + str(self.max_header_bytes).encode() + b' bytes"}}'
                )
                _reply(self.transport, b"431 Request Header Fields Too Large", msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._header_bytes, self._began_in_chunk = True, 0, True
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests the keep-alive (idle) timeout applies, not the header timeout.
        self._in_headers = False
        self._disarm()


def guarded_protocol(settings: ProxySettings) -> type[GuardedHttpTools]:
    """A ``GuardedHttpTools`` subclass carrying ``settings``' limits."""
    return type(
        "ProxyHttpProtocol",
        (GuardedHttpTools,),
        {"max_header_bytes": settings.max_header_bytes, "header_timeout_s": settings.header_timeout_s},
    )


def uvicorn_config(app: Any, settings: ProxySettings, **kwargs: Any) -> uvicorn.Config:
    """The uvicorn configuration of the proxy (``kwargs``: log level, graceful shutdown, ...)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=guarded_protocol(settings),
        timeout_keep_alive=max(1, round(settings.idle_timeout_s)),
        access_log=False,
        **kwargs,
    )
