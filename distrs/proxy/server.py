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
  holding more than the limit plus one read; a head that arrives whole in one read is measured
  when it is complete and refused the same way before the app sees it; and it arms a timer when a request starts (or the
  connection opens) that answers 408 and closes if the headers are not complete in time.
* Those two answers are sent with a lingering close: the response, then a half-close (FIN), then
  whatever the client still sends is read and dropped, up to ``LINGER_BYTES`` or ``LINGER_S``,
  before the connection closes. Closing at once with unread input makes the kernel send a reset,
  and a client still writing then loses the 431 or 408 it was sent (docs/security.md promises
  both); a client that floods on past the linger bound is cut off all the same.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from distrs.config import ProxySettings

LINGER_BYTES = 1 << 20  # input read and dropped after a 431/408 before closing
LINGER_S = 2.0


def _reply(transport: asyncio.Transport, status: bytes, message: bytes) -> None:
    transport.write(
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(message)).encode() + b"\r\nconnection: close\r\n\r\n" + message
    )


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
        self._refused = False
        self._linger_left = 0  # bytes still to drop after a 431/408 before closing

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _refuse(self, status: bytes, message: bytes) -> None:
        """Answer ``status`` and close with a lingering close (module docstring)."""
        self._disarm()
        self._refused = True
        _reply(self.transport, status, message)
        if self.transport.can_write_eof():
            self.transport.write_eof()  # FIN after the response; reading goes on
            self._linger_left = LINGER_BYTES
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._in_headers and not self._refused and not self.transport.is_closing():
            msg = b'{"error": {"code": "header_timeout", "message": "request headers not received in time"}}'
            self._refuse(b"408 Request Timeout", msg)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # drop what the client still sends, up to the bound
            self._linger_left -= len(data)
            if self._linger_left < 0:
                self.transport.close()
            return
        self._began_in_chunk = False
        super().data_received(data)
        if self._in_headers and not self._refused and not self.transport.is_closing():
            if not self._began_in_chunk:  # the part of a chunk before a new request is not its
                self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._too_large()

    def _too_large(self) -> None:
        msg = (
            b'{"error": {"code": "headers_too_large", "message": "request line and headers '
            b"exceed " + str(self.max_header_bytes).encode() + b' bytes"}}'
        )
        self._refuse(b"431 Request Header Fields Too Large", msg)

    def on_message_begin(self) -> None:
        if self._refused:  # a request pipelined behind a refused one is never started
            return
        super().on_message_begin()
        self._in_headers, self._header_bytes, self._began_in_chunk = True, 0, True
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        if self._refused:
            return
        # the request line and headers as received (name: value CRLF each, the blank line)
        head = len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers) + 2
        if head > self.max_header_bytes:  # arrived whole in one read: measured here
            self._too_large()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

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
