"""One pipelined connection for the store's script calls (standalone Redis).

Why: every lease, submission and completion is one ``EVALSHA``, and the script coalescer
(``coalesce.py``) already sends the calls of an event-loop tick together. Through redis-py's
asyncio pipeline each such group of calls still costs a pool checkout under a lock, a command stack, a
drain, and per reply a read under its own timeout context with a response callback: measured
under load, about as much CPU per lifecycle as the proxy's whole handler for the call. Script
calls need none of it: their replies come back in the order they were sent, and nothing else
shares their connection.

So the store keeps one connection of its own, opened by the client's pool
(``make_connection``: the same URL, password, TLS, database, keepalive and connect timeout as
every other connection of the store), writes each group of calls with one ``write`` and has one reader
task hand each reply to its caller, in order, as it arrives (hiredis parses them). Error replies
come back as redis-py's own exceptions (its parser's ``parse_error``), so a ``NOSCRIPT`` is a
``NoScriptError`` and a script's ``DISTRS`` error a ``ResponseError``, as through a pipeline.

A lost connection fails every call in flight with redis-py's ``ConnectionError`` (the store
answers 503; a call is never sent twice on it, so a lease or completion that may have
run is retried by its caller, whose retry the scripts answer idempotently or with a clear
error), and the next call connects again. A caller cancelled while it waits leaves its reply to
be read and dropped: the connection stays in step.

Sentinel and cluster modes keep redis-py's connections: there the primary can move under a
connection, and redis-py follows it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
from redis._parsers import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse

# Write-buffer size past which a sender waits for the socket to drain (Redis reading slowly).
DRAIN_ABOVE = 1 << 20


class ScriptConnection:
    """Pipelined script calls over one connection of ``pool`` (module docstring)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._conn: Any = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._closed = False

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one write; their replies in order, an error reply as its exception
        (not raised). Raises redis-py's ``ConnectionError`` when the connection fails."""
        if self._writer is None:
            await self._connect()
        writer, conn = self._writer, self._conn
        if writer is None or conn is None:
            raise RedisConnectionError("redis connection lost")
        loop = asyncio.get_running_loop()
        data = b"".join(part for cmd in commands for part in conn.pack_command(*cmd))
        futures = [loop.create_future() for _ in commands]
        writer.write(data)  # in call order with the futures: replies are matched in that order
        self._pending.extend(futures)
        if writer.transport.get_write_buffer_size() > DRAIN_ABOVE:
            await writer.drain()
        return [await f for f in futures]

    async def _connect(self) -> None:
        """Open the connection (one opening shared by every caller that needs it)."""
        if self._closed:
            raise RedisConnectionError("the store is closed")
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            return
        self._connecting = asyncio.get_running_loop().create_future()
        try:
            conn = self._pool.make_connection()
            await conn.connect()
            reader, writer = conn._reader, conn._writer
            encoder = conn.encoder
            parser = hiredis.Reader(
                protocolError=InvalidResponse,
                replyError=BaseParser.parse_error,
                encoding=encoder.encoding if encoder.decode_responses else None,
                errors=encoder.encoding_errors if encoder.decode_responses else None,
            )
            self._conn, self._writer = conn, writer
            self._reader_task = asyncio.create_task(self._read(reader, parser), name="distrs-redis-scripts")
            self._connecting.set_result(None)
        except BaseException as exc:
            self._connecting.set_exception(
                exc if isinstance(exc, Exception) else RedisConnectionError(str(exc))
            )
            self._connecting.exception()  # retrieved: the callers waiting on it get it raised
            raise
        finally:
            self._connecting = None

    async def _read(self, reader: asyncio.StreamReader, parser: Any) -> None:
        error: Exception = RedisConnectionError("Connection closed by server.")
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    if not self._pending:  # a reply nobody asked for: out of step, start over
                        error = RedisConnectionError("unexpected reply on the script connection")
                        return
                    fut = self._pending.popleft()
                    if not fut.done():
                        fut.set_result(reply)
        except asyncio.CancelledError:
            error = RedisConnectionError("the store is closed")
            raise
        except Exception as exc:  # a reset, a protocol error
            error = exc if isinstance(exc, RedisConnectionError) else RedisConnectionError(str(exc))
        finally:
            await self._lost(error)

    async def _lost(self, error: Exception) -> None:
        """The connection is gone: every call in flight fails, the next call connects again."""
        conn, pending = self._conn, self._pending
        self._conn = self._writer = None
        self._reader_task = None
        self._pending = deque()
        for fut in pending:
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # marked retrieved: a caller that was cancelled meanwhile is gone
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect()

    def open(self) -> None:
        """Allow connecting (again, after ``close``)."""
        self._closed = False

    async def close(self) -> None:
        """Close the connection; calls fail until ``open``."""
        self._closed = True
        task = self._reader_task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
