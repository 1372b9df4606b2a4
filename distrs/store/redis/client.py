"""The Redis client the store uses, with dead-connection detection.

Why: the store's calls wait on Redis replies, some of them for long on purpose (``XREAD BLOCK``
for the planner's events, the pub/sub connection that wakes lease long-polls). If the network
drops a connection without a FIN or RST (a node lost, a partition, a NAT entry gone), the peer
never answers and a read blocks until the kernel gives up on its own, which for an idle TCP
connection is hours. A read timeout would not do: it would have to stay above the longest
``XREAD BLOCK`` and would fire on every quiet pub/sub interval. TCP keepalive probes the peer
instead: after ``redis_keepalive_s`` of silence the kernel sends probes every half of that, and
after three unanswered ones the connection fails, the call raises, and the store's retry or
reconnect logic takes over. So a dead Redis connection is found within about
2.5 × ``redis_keepalive_s``, and a live one that is simply quiet is never touched.

``socket_connect_timeout`` bounds a connect to an address that does not answer at all (a
blackholed Service IP), which would otherwise wait for the kernel's SYN retries (~2 minutes).

Cluster mode (``connect_cluster``): redis-py's asyncio ``RedisCluster`` over the same socket
options. The URL names any seed node; the client reads the topology from it (CLUSTER SLOTS) and
afterwards follows the cluster, not the seed: it follows ``MOVED``/``ASK`` redirections, and a
``TRYAGAIN``, ``CLUSTERDOWN`` or a connection lost to a failed primary makes it read the slot map
again and retry (bounded: ``CLUSTER_RETRIES`` retries with backoff); what still fails reaches
the store as an error it answers 503 (the store also re-reads the slot map for its pipelines).

Keepalive applies to TCP URLs (``redis://``, ``rediss://``); a ``unix://`` socket has no network
in between and gets only the connect timeout.

Commands are packed by hiredis (``HiredisPacking``) on standalone connections:
redis-py's asyncio connection packs every command in Python, the largest single share of the
proxy's CPU on the Redis path (each lease, submit or completion is one ``EVALSHA`` with a dozen
arguments), while its sync connection already uses hiredis for it. Strings, bytes and integers
go to hiredis as they are and floats as ``repr`` (as redis-py's encoder writes them); anything
else goes through the client's own encoder, so what is sent is byte for byte what redis-py would
send (``tests/unit/store/test_redis_client.py``).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from distrs.config import StoreSettings

KEEPALIVE_PROBES = 3
# Cluster: attempts per command across a failover or slot move, with backoff capped at 0.5 s, so
# a call gives up (503) after about 2-3 s rather than hold a request for the whole failover.
CLUSTER_RETRIES = 6
HEALTH_CHECK_INTERVAL_S = 30


def keepalive_options(idle_s: float) -> dict[int, int]:
    """TCP keepalive settings for ``idle_s``: first probe after idle_s, then every idle_s / 2,
    the connection failing after ``KEEPALIVE_PROBES`` unanswered probes. Only the options this
    platform has (Linux has all three; others may lack some and keep their defaults)."""
    idle = max(1, round(idle_s))
    wanted = {
        "TCP_KEEPIDLE": idle,
        "TCP_KEEPINTVL": max(1, idle // 2),
        "TCP_KEEPCNT": KEEPALIVE_PROBES,
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


class HiredisPacking:
    """Packs commands with hiredis (see the module docstring); mixed in before a redis-py
    asyncio connection class."""

    encoder: Any

    def pack_command(self, *args: Any) -> list[bytes]:
        # as redis-py does: a command name given with spaces ("CONFIG GET") is several arguments
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        out: list[Any] = []
        for a in args:
            kind = type(a)
            if kind is str or kind is bytes or kind is int:
                out.append(a)
            elif kind is float:
                out.append(repr(a))
            else:  # bool, memoryview, subclasses: redis-py's own rules (and errors)
                out.append(self.encoder.encode(a))
        return [hiredis.pack_command(tuple(out))]


class HiredisConnection(HiredisPacking, Connection):
    """``redis://``"""


class HiredisSSLConnection(HiredisPacking, SSLConnection):
    """``rediss://``"""


class HiredisUnixConnection(HiredisPacking, UnixDomainSocketConnection):
    """``unix://``"""


CONNECTION_CLASSES: dict[str, type[Connection] | type[UnixDomainSocketConnection]] = {
    "redis": HiredisConnection,
    "rediss": HiredisSSLConnection,
    "unix": HiredisUnixConnection,
}


def client_options(url: str, settings: StoreSettings) -> dict[str, Any]:
    """Keyword arguments for ``redis.asyncio.Redis.from_url``."""
    opts: dict[str, Any] = {
        "decode_responses": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "socket_connect_timeout": settings.redis_connect_timeout_s,
    }
    if urlsplit(url).scheme in ("redis", "rediss"):
        opts["socket_keepalive"] = True
        opts["socket_keepalive_options"] = keepalive_options(settings.redis_keepalive_s)
    return opts


def connect(url: str, settings: StoreSettings) -> aioredis.Redis:
    """A client for ``url``; connections are opened lazily, on first use.

    The pool blocks: redis-py's default pool raises "Too many connections" the moment more than
    its maximum (100) calls are in flight, which a busy proxy reaches with a few hundred
    long-polling workers and trainers, and every such call would be answered 503. Here a call
    beyond ``redis_max_connections`` waits for a connection to come back, and only one that
    waits longer than ``redis_pool_timeout_s`` fails (a ``ConnectionError``: store unavailable)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_pool_timeout_s,
        **client_options(url, settings),
    )
    packing = CONNECTION_CLASSES.get(urlsplit(url).scheme)
    if packing is not None and issubclass(packing, pool.connection_class):  # the same, packing faster
        pool.connection_class = packing
    return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose() closes both


def connect_cluster(url: str, settings: StoreSettings) -> RedisCluster:
    """A Redis Cluster client seeded by ``url``; the topology is read on first use. Its pools are
    per node, ``redis_max_connections`` each (redis-py's cluster client has no blocking pool: a
    call beyond them fails at once, which the store answers 503)."""
    opts = client_options(url, settings)
    return RedisCluster.from_url(
        url,
        **opts,
        max_connections=settings.redis_max_connections,
        socket_timeout=None,  # as standalone: XREAD BLOCK waits; keepalive finds dead peers
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), CLUSTER_RETRIES),
    )
