"""The store's Redis connections carry TCP keepalive (dead-peer detection) and work over TCP and
unix sockets; the options are read from real sockets of a real redis-server."""

from __future__ import annotations

import socket
import uuid

import pytest

from distrs.config import StoreSettings
from distrs.store.redis import RedisStore
from distrs.store.redis.client import KEEPALIVE_PROBES, client_options, keepalive_options
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.redis


def _settings(url: str, **extra: object) -> StoreSettings:
    return StoreSettings.model_validate({"redis_url": url, **extra})


def _sockets(store: RedisStore) -> list[socket.socket]:
    """The sockets of the store's open pooled connections."""
    pool = store.topology.client.connection_pool
    out = []
    for conn in pool._available_connections:
        writer = conn._writer
        assert writer is not None
        out.append(writer.get_extra_info("socket"))
    return out


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="needs Linux TCP keepalive options")
async def test_tcp_connections_probe_a_silent_peer(redis_server: RedisServer) -> None:
    url = redis_server.url
    store = RedisStore.from_url(
        url, _settings(url, redis_keepalive_s=12), namespace=f"t-{uuid.uuid4().hex[:8]}"
    )
    try:
        assert await store.ping()
        socks = _sockets(store)
        assert socks, "the ping left no pooled connection"
        for s in socks:
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 12
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 6
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == KEEPALIVE_PROBES
    finally:
        await store.close()


async def test_unix_socket_url_works_without_keepalive(redis_server: RedisServer) -> None:
    url = redis_server.unix_url
    assert "socket_keepalive" not in client_options(url, _settings(url))
    store = RedisStore.from_url(url, _settings(url), namespace=f"t-{uuid.uuid4().hex[:8]}")
    try:
        assert await store.ping()
    finally:
        await store.close()


def test_options_follow_settings() -> None:
    url = "redis://redis.example:6379/0"
    opts = client_options(url, _settings(url, redis_connect_timeout_s=2.5, redis_keepalive_s=20))
    assert opts["socket_connect_timeout"] == 2.5
    assert opts["socket_keepalive"] is True
    assert opts["socket_keepalive_options"] == keepalive_options(20)
    assert opts["decode_responses"] is True
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert keepalive_options(20) == {
            socket.TCP_KEEPIDLE: 20,
            socket.TCP_KEEPINTVL: 10,
            socket.TCP_KEEPCNT: KEEPALIVE_PROBES,
        }
    assert client_options("rediss://r:6380/0", _settings(url))["socket_keepalive"] is True


def test_keepalive_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="redis_keepalive_s"):
        _settings("redis://r/0", redis_keepalive_s=0)


async def test_calls_beyond_the_pool_wait_for_a_connection(redis_server: RedisServer) -> None:
    """More calls in flight than the pool has connections: they queue for one instead of failing
    with redis-py's "Too many connections" (which the proxy would answer 503), and the pool never
    opens more than its maximum."""
    import asyncio

    url = redis_server.url
    store = RedisStore.from_url(
        url, _settings(url, redis_max_connections=3), namespace=f"t-{uuid.uuid4().hex[:8]}"
    )
    try:
        results = await asyncio.gather(*(store.get_batch("t", f"b{i}") for i in range(300)))
        assert results == [None] * 300
        pool = store.topology.client.connection_pool
        assert pool.max_connections == 3
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 3
    finally:
        await store.close()
