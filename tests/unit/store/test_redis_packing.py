"""Commands packed by hiredis (``HiredisPacking``) are byte for byte what redis-py packs."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from distrs.config import StoreSettings
from distrs.store.redis.client import CONNECTION_CLASSES, HiredisConnection, connect

CASES: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "{distrs}:t:tenant/täsk", b"\x00\xffraw", 1, -7, 2.5, 0.1, 1e20, 1 / 3),
    ("CONFIG GET", "maxmemory"),  # a command name with a space: two arguments
    (b"CLIENT SETNAME", "x"),
    ("SET", "k", "x" * 200_000),  # beyond redis-py's buffer cut-off
    ("HSET", "h", "f", memoryview(b"view")),
    ("PING",),
]


@pytest.mark.parametrize("args", CASES, ids=range(len(CASES)))
def test_packed_as_redis_py_packs(args: tuple[Any, ...]) -> None:
    ours, theirs = HiredisConnection(), Connection()
    assert b"".join(bytes(x) for x in ours.pack_command(*args)) == b"".join(
        bytes(x) for x in theirs.pack_command(*args)
    )


def test_what_redis_py_refuses_is_refused() -> None:
    for bad in (True, None, [1]):
        with pytest.raises(DataError):
            HiredisConnection().pack_command("SET", "k", bad)


def test_standalone_clients_use_it_for_every_scheme() -> None:
    s = StoreSettings.model_validate({})
    for url, scheme in (
        ("redis://h:1/0", "redis"),
        ("rediss://h:1/0", "rediss"),
        ("unix:///tmp/r.sock", "unix"),
    ):
        pool = connect(url, s).connection_pool
        assert pool.connection_class is CONNECTION_CLASSES[scheme], url
