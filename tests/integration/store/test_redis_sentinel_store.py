"""What sentinel mode adds to the standalone store, on a real primary, replica and three Sentinels
(tests/fixtures/redis_sentinel.py): acknowledged transitions are on the replica when their call
returns (WAIT in the same pipeline) and nothing else waits; after the primary is killed, or
demoted by a failover while it still answers (READONLY), callers see only ``Unavailable`` until
the store reaches the promoted replica by itself, and what was acknowledged before is there.
The whole service over Sentinels, with load, is tests/faults/test_sentinel_failover.py."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
import redis.asyncio as aioredis
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError

from distrs.config import StoreSettings
from distrs.core.model import BatchInfo
from distrs.store.base import NewRequest
from distrs.store.errors import Unavailable
from distrs.store.redis import RedisStore
from tests.fixtures.redis_cluster import command
from tests.fixtures.redis_sentinel import MASTER, RedisSentinel

pytestmark = pytest.mark.redis

T = TypeVar("T")


def _settings(url: str) -> StoreSettings:
    # WAIT up to 2 s: what is checked is what an acknowledgement means once the replica has
    # answered; the default 500 ms can run out on a loaded test machine, and a write acknowledged
    # after a shortfall is on its primary only (docs/store.md), which these tests are not about
    return StoreSettings.model_validate(
        {"redis_url": url, "redis_mode": "sentinel", "default_batch_span_s": 600,
         "redis_wait_timeout_ms": 2000}
    )  # fmt: skip


async def _store(deployment: RedisSentinel) -> RedisStore:
    store = RedisStore.from_url(
        deployment.url, _settings(deployment.url), namespace=f"s-{uuid.uuid4().hex[:10]}"
    )
    await store.start()
    return store


@pytest.fixture
async def store(redis_sentinel: RedisSentinel) -> AsyncIterator[RedisStore]:
    s = await _store(redis_sentinel)
    yield s
    await s.flush_namespace()
    await s.close()


def req(rid: str, task: str = "t") -> NewRequest:
    return NewRequest(
        tenant="default", task=task, batch_id="b", request_id=rid, reward_type="synthetic",
        route=["compile"], payload={"n": rid},
    )  # fmt: skip


def wait_calls(port: int) -> int:
    """How many WAIT commands the node has run since its stats were reset."""
    for line in command(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_wait:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


async def test_acknowledged_transitions_are_on_the_replica_when_they_return_and_leases_do_not_wait(
    store: RedisStore, redis_sentinel: RedisSentinel
) -> None:
    primary = redis_sentinel.master_port()
    assert primary is not None
    replica = next(n.port for n in redis_sentinel.data_nodes if n.port != primary)
    command(primary, "CONFIG", "RESETSTAT")
    await store.register_batch(BatchInfo(task="t", batch_id="b", size=2), 100.0)
    registered = wait_calls(primary)
    assert registered >= 1  # (2 when the primary first had to learn the script: EVAL and WAIT again)
    await store.submit([req("r0"), req("r1")], 100.0)
    submitted = wait_calls(primary)
    assert submitted > registered
    # WAIT answered: the replica has the submission, read from the replica itself
    key = store.keys.request("t", "r0")
    assert command(replica, "HGET", key, "request_id").strip() == "r0"
    lease = await store.lease("compile", "w", 101.0, 30.0)
    assert lease is not None
    await store.heartbeat(lease.lease_id, "w", 102.0, 30.0)
    assert wait_calls(primary) == submitted  # taking and keeping a lease acknowledges nothing


async def test_the_primarys_pool_blocks_at_the_standalone_limits_over_keepalive_sockets(
    redis_sentinel: RedisSentinel,
) -> None:
    url = redis_sentinel.url
    settings = StoreSettings.model_validate(
        {"redis_url": url, "redis_mode": "sentinel", "redis_max_connections": 2, "redis_pool_timeout_s": 0.2,
         "redis_keepalive_s": 12}
    )  # fmt: skip
    store = RedisStore.from_url(url, settings, namespace=f"s-{uuid.uuid4().hex[:10]}")
    try:
        pool = store.topology.client.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool) and isinstance(pool, SentinelConnectionPool)
        assert (pool.max_connections, pool.timeout) == (2, 0.2)
        held = [await pool.get_connection(), await pool.get_connection()]
        assert {(c.host, c.port) for c in held} == {("127.0.0.1", redis_sentinel.master_port())}
        sock = held[0]._writer.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        with pytest.raises(RedisConnectionError, match="No connection available"):
            await pool.get_connection()  # a third caller waited pool_timeout, then gave up
        for c in held:
            await pool.release(c)
        assert await store.ping()
    finally:
        await store.close()


async def until_available(call: Callable[[], Awaitable[T]], cap_s: float = 60.0) -> tuple[T, int]:
    """Retry ``call`` through ``Unavailable`` only (anything else fails the test): its result and
    how many times it was unavailable. ``cap_s`` is a cap, not a timing assertion."""
    deadline = time.monotonic() + cap_s
    refused = 0
    while True:
        try:
            return await call(), refused
        except Unavailable:
            refused += 1
            assert time.monotonic() < deadline, "the store did not reach the new primary"
            await asyncio.sleep(0.1)


async def test_a_killed_primary_is_replaced_and_the_store_follows_without_losing_the_acknowledged(
    fresh_redis_sentinel: RedisSentinel,
) -> None:
    deployment = fresh_redis_sentinel
    store = await _store(deployment)
    try:
        await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 100.0)
        await store.submit([req("r0"), req("r1")], 100.0)
        old = deployment.kill_primary()
        _, refused = await until_available(lambda: store.submit([req("r2")], 101.0))
        assert refused >= 1  # the dead primary was seen as unavailable, not as an error
        new = deployment.master_port()
        assert new is not None and new != old
        got = []
        for _ in range(3):
            lease, _ = await until_available(lambda: store.lease("compile", "w", 102.0, 30.0))
            assert lease is not None
            got.append(lease.request_id)
        assert sorted(got) == ["r0", "r1", "r2"]
        assert await store.lease("compile", "w", 102.0, 30.0) is None  # nothing twice
    finally:
        await store.close()


async def test_a_primary_demoted_while_it_still_answers_sends_the_store_to_the_promoted_one(
    fresh_redis_sentinel: RedisSentinel,
) -> None:
    deployment = fresh_redis_sentinel
    store = await _store(deployment)
    try:
        await store.register_batch(BatchInfo(task="t", batch_id="b", size=3), 100.0)
        await store.submit([req("r0")], 100.0)  # the store now holds connections to the primary
        old = deployment.master_port()
        assert old is not None
        assert command(deployment.sentinels[0].port, "SENTINEL", "FAILOVER", MASTER).strip() == "OK"
        new = await asyncio.get_running_loop().run_in_executor(None, deployment.wait_failover, old)
        # the old primary now answers READONLY; the store must reconnect, never write there
        deadline = time.monotonic() + 60
        while "role:slave" not in command(old, "INFO", "replication"):
            assert time.monotonic() < deadline, "the old primary was not demoted"
            await asyncio.sleep(0.1)
        await until_available(lambda: store.submit([req("r1"), req("r2")], 101.0))
        for rid in ("r0", "r1", "r2"):
            assert command(new, "HGET", store.keys.request("t", rid), "request_id").strip() == rid
        lease, _ = await until_available(lambda: store.lease("compile", "w", 102.0, 30.0))
        assert lease is not None and lease.request_id == "r0"
    finally:
        await store.close()


async def test_passwords_of_the_nodes_and_of_the_sentinels_are_each_used_where_they_belong(
    auth_redis_sentinel: RedisSentinel,
) -> None:
    deployment = auth_redis_sentinel
    url = deployment.url  # carries the nodes' password
    assert ":node-pw@" in url

    async def works(sentinel_password: str | None) -> bool:
        settings = StoreSettings.model_validate(
            {"redis_url": url, "redis_mode": "sentinel", "redis_sentinel_password": sentinel_password}
        )
        store = RedisStore.from_url(url, settings, namespace=f"s-{uuid.uuid4().hex[:10]}")
        try:
            if not await store.ping():
                return False
            await store.register_batch(BatchInfo(task="t", batch_id="b", size=1), 100.0)
            await store.submit([req("r0")], 100.0)
            lease = await store.lease("compile", "w", 101.0, 30.0)
            return lease is not None and lease.request_id == "r0"
        except Unavailable:
            return False
        finally:
            await store.close()

    assert await works("sentinel-pw")
    assert not await works(None)  # the Sentinels refuse to name the primary without theirs
    assert not await works("node-pw")
