"""The standalone store's script connection (``store/redis/script_connection.py``) against a real
redis-server: replies reach their own callers in order, error replies are redis-py's exceptions,
a lost connection fails what is in flight and the next call connects again, and a cancelled
caller does not put the connection out of step."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from distrs.config import StoreSettings
from distrs.store.redis.client import connect
from distrs.store.redis.script_connection import ScriptConnection
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.redis

ECHO = "return ARGV[1]"
# busy for about ARGV[1] ms inside Redis (DEBUG SLEEP is off by default)
SPIN = "local t = redis.call('TIME'); local s = t[1] * 1000 + t[2] / 1000; " \
    "repeat t = redis.call('TIME') until t[1] * 1000 + t[2] / 1000 - s >= tonumber(ARGV[1]); return 'done'"  # fmt: skip


def _client(server: RedisServer, db: int = 0) -> aioredis.Redis:
    url = f"redis://127.0.0.1:{server.port}/{db}"
    return connect(url, StoreSettings.model_validate({"redis_url": url}))


@contextlib.asynccontextmanager
async def _connection(
    server: RedisServer, db: int = 0
) -> AsyncIterator[tuple[aioredis.Redis, ScriptConnection]]:
    """A client of ``server`` and a connection over its pool, both closed afterwards."""
    client = _client(server, db)
    connection = ScriptConnection(client.connection_pool)
    try:
        yield client, connection
    finally:
        await connection.close()
        await client.aclose()


async def test_replies_reach_their_own_callers_in_order(redis_server: RedisServer) -> None:
    async with _connection(redis_server) as (_, connection):
        calls = [
            connection.execute([("EVAL", ECHO, 0, f"{i}-{j}") for j in range(i % 5 + 1)]) for i in range(200)
        ]
        got = await asyncio.gather(*calls)
        assert got == [[f"{i}-{j}" for j in range(i % 5 + 1)] for i in range(200)]


async def test_error_replies_are_redis_py_exceptions_not_raised(redis_server: RedisServer) -> None:
    async with _connection(redis_server) as (_, connection):
        out = await connection.execute(
            [
                ("EVALSHA", "0" * 40, 0),
                ("EVAL", "return redis.error_reply('DISTRS x {}')", 0),
                ("EVAL", ECHO, 0, "ok"),
            ]
        )
        assert isinstance(out[0], NoScriptError)
        assert isinstance(out[1], ResponseError) and str(out[1]).startswith("DISTRS x")
        assert out[2] == "ok"


async def test_it_uses_the_clients_database(redis_server: RedisServer) -> None:
    key = f"connection-{uuid.uuid4().hex}"
    async with _connection(redis_server, db=3) as (client, connection):
        assert await connection.execute([("SET", key, "v")]) == ["OK"]
        assert await client.get(key) == "v"
        other = _client(redis_server, db=0)
        assert await other.get(key) is None
        await other.aclose()


async def test_a_killed_connection_fails_what_is_in_flight_then_reconnects(redis_server: RedisServer) -> None:
    async with _connection(redis_server) as (_, connection):
        [own] = await connection.execute([("CLIENT", "ID")])
        # the server closes the connection after the first command: the second is in flight
        with pytest.raises(RedisConnectionError):
            await connection.execute(
                [("CLIENT", "KILL", "ID", own, "SKIPME", "no"), ("EVAL", ECHO, 0, "lost")]
            )
        assert await connection.execute([("EVAL", ECHO, 0, "again")]) == ["again"]
        [again] = await connection.execute([("CLIENT", "ID")])
        assert again != own  # a new connection


async def test_a_cancelled_caller_leaves_the_connection_in_step(redis_server: RedisServer) -> None:
    async with _connection(redis_server) as (_, connection):
        slow = asyncio.create_task(connection.execute([("EVAL", SPIN, 0, "100"), ("EVAL", ECHO, 0, "late")]))
        await asyncio.sleep(0.02)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        got = await asyncio.gather(*(connection.execute([("EVAL", ECHO, 0, str(i))]) for i in range(20)))
        assert got == [[str(i)] for i in range(20)]


async def test_closed_it_refuses_and_opened_it_serves_again(redis_server: RedisServer) -> None:
    async with _connection(redis_server) as (_, connection):
        assert await connection.execute([("EVAL", ECHO, 0, "a")]) == ["a"]
        await connection.close()
        with pytest.raises(RedisConnectionError):
            await connection.execute([("EVAL", ECHO, 0, "b")])
        connection.open()
        assert await connection.execute([("EVAL", ECHO, 0, "c")]) == ["c"]


async def test_a_server_that_is_gone_is_a_connection_error() -> None:
    url = "redis://127.0.0.1:1/0"
    client = connect(url, StoreSettings.model_validate({"redis_url": url}))
    connection = ScriptConnection(client.connection_pool)
    try:
        with pytest.raises(RedisConnectionError):
            await connection.execute([("EVAL", ECHO, 0, "x")])
        with pytest.raises(RedisConnectionError):  # and again: no opening is left half done
            await connection.execute([("EVAL", ECHO, 0, "x")])
    finally:
        await connection.close()
        await client.aclose()
