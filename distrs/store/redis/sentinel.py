"""The Redis client of sentinel mode: the primary that Redis Sentinel names, followed across
failovers (``DISTRS_REDIS_MODE=sentinel``; URL form in ``store/sentinel_url.py``).

Why redis-py's Sentinel client rather than a fixed address: after a failover the old primary is
gone or demoted to a replica, and only the Sentinels know which replica they promoted. redis-py's
``SentinelConnectionPool`` asks them for the primary's address each time it opens a connection,
drops idle connections when that address changes, and turns a ``READONLY`` reply (a demoted
primary that still answers) into a connection error that closes the connection, so the next
call connects to the new primary. What fails during the gap (a connection refused by the dead
primary, ``MasterNotFoundError`` while the Sentinels have not agreed yet, ``READONLY``) reaches
the store as an error it answers 503 with Retry-After (``Topology.call``, topology.py); nothing is retried
blindly here, since a script whose reply was lost may have run.

The pool is redis-py's Sentinel pool over its blocking pool (the same limits as standalone:
``redis_max_connections``, calls beyond them waiting ``redis_pool_timeout_s``), and connections
to the Redis nodes carry the same keepalive and connect timeout (client.py). Connections to
the Sentinels get the connect timeout as their read timeout too, and no retries: their replies
are immediate, and a Sentinel that is down or stops answering must not hold up the search for the
primary (redis-py asks the next one).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from distrs.config import StoreSettings
from distrs.store.redis.client import HEALTH_CHECK_INTERVAL_S, keepalive_options
from distrs.store.sentinel_url import SentinelTarget, parse_sentinel_url


class BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel pool whose callers wait for a free connection (``BlockingConnectionPool``)."""


class SentinelRedis(aioredis.Redis):
    """The primary's client; closing it also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool: Any = self.connection_pool
        await pool.sentinel_manager.aclose()


def sentinel_options(
    target: SentinelTarget, settings: StoreSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keyword arguments for the connections to the Redis nodes and to the Sentinels."""
    socket = {
        "socket_connect_timeout": settings.redis_connect_timeout_s,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive_options(settings.redis_keepalive_s),
    }
    node: dict[str, Any] = {
        **socket,
        "decode_responses": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "db": target.db,
        "username": target.username,
        "password": target.password,
    }
    # one try per Sentinel: redis-py's client would retry one that is down 3 times, with seconds
    # of backoff, before asking the next; during a failover the next must be asked at once
    sentinel: dict[str, Any] = {
        **socket,
        "socket_timeout": settings.redis_connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.redis_sentinel_password is not None:
        sentinel["password"] = settings.redis_sentinel_password.get_secret_value()
    if target.tls:  # the same TLS options to the Sentinels and to the nodes
        for opts in (node, sentinel):
            opts["ssl"] = True
            opts.update(target.tls_options)
    return node, sentinel


def connect_sentinel(url: str, settings: StoreSettings) -> SentinelRedis:
    """A client of the primary the URL's Sentinels name; connections open lazily, on first use."""
    target = parse_sentinel_url(url)
    node, sentinel_kwargs = sentinel_options(target, settings)
    manager = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    client: SentinelRedis = manager.master_for(
        target.master,
        redis_class=SentinelRedis,
        connection_pool_class=BlockingSentinelPool,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_pool_timeout_s,
        **node,
    )
    return client
