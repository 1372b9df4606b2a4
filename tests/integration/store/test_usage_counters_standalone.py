"""Standalone Redis: the transition scripts move the per-tenant usage counters themselves.

Every kind of transition that changes what a tenant uses (a submission with a duplicate, a stage
that moves a request on, a final completion, a bundle that completes a batch, a lease expiry past
``max_attempts``) runs once, and the counters are then compared with explicit figures and with
the exact recount: a script that forgot a counter, or measured a result differently from
``len(Result.model_dump_json())`` (the figure the quotas have always counted), fails here. The
size is measured in Lua (``lua/lib.lua``), so its float and string measures are also checked
against pydantic over many values.
"""

from __future__ import annotations

import math
import random
import struct
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import TypeAdapter

from distrs.config import StoreSettings
from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.store.base import NewRequest, TenantUsage
from distrs.store.redis import RedisStore
from tests.fixtures.redis_server import RedisServer

pytestmark = pytest.mark.redis

TTL = 3600.0
TENANT = "al:i%ce"  # both characters keys.py escapes in a key component
TASK = f"{TENANT}/t"


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    url = str(redis_server.url)
    settings = StoreSettings.model_validate({"redis_url": url, "result_ttl_s": TTL})
    s = RedisStore.from_url(url, settings, namespace=f"u-{uuid.uuid4().hex[:12]}")
    await s.start()
    assert not s.keys.cluster
    yield s
    await s.flush_namespace()
    await s.close()


def _req(rid: str, batch: str, stage: str = "s1", tenant: str = TENANT) -> NewRequest:
    return NewRequest(
        tenant=tenant, task=f"{tenant}/t", batch_id=batch, request_id=rid, reward_type="synthetic",
        route=[stage, "s2"], payload={},
    )  # fmt: skip


async def _counters(s: RedisStore, tenant: str = TENANT) -> dict[str, Any]:
    k, r = s.keys, s.topology.client
    return {
        "queued": await r.hgetall(k.usage_queued(tenant)),
        "bytes": {b: int(v) for b, v in (await r.hgetall(k.usage_bytes(tenant))).items()},
        "expiry": dict(await r.zrange(k.usage_expiry(tenant), 0, -1, withscores=True)),
        "totals": await r.hgetall(k.usage_totals(tenant)),
    }


async def _sizes(s: RedisStore, batch: str, task: str = TASK) -> int:
    return sum(len(r.model_dump_json()) for r in await s.batch_results(task, batch))


async def test_every_standalone_script_moves_the_counters_it_must(store: RedisStore) -> None:
    k = store.keys
    b1, b2, b3 = (k.batch(TASK, b) for b in ("b1", "b2", "b3"))
    for batch, size in (("b1", 3), ("b2", 2), ("b3", 1)):
        await store.register_batch(BatchInfo(tenant=TENANT, task=TASK, batch_id=batch, size=size), 100.0)
    await store.register_batch(BatchInfo(tenant="bob", task="bob/t", batch_id="bb", size=2), 100.0)
    bob = _req("q1", "bb", tenant="bob")  # queued between b1 and b2: in the bundle below
    reqs = [_req("r0", "b1"), _req("r1", "b1"), _req("r2", "b1"), bob, _req("r3", "b2"), _req("r5", "b3")]
    out = await store.submit([*reqs, _req("r4", "b2", stage="s1/x")], 101.0)
    assert len(out.accepted) == 7
    again = await store.submit([_req("r0", "b1"), _req("r4", "b2", stage="s1/x")], 101.5)
    assert again.duplicates == ["r0", "r4"]  # counted once
    got = await _counters(store)
    assert got["queued"] == {b1: "3", b2: "2", b3: "1"}
    assert got["totals"] == {"queued": "6"}
    assert got["bytes"] == {} and got["expiry"] == {}

    # r0: a stage that moves it on changes nothing; its final result at the next stage counts
    lease = await store.lease("s1", "w/ö", 102.0, 30.0)
    assert lease is not None and lease.request_id == "r0"
    await store.complete(
        Completion(lease_id=lease.lease_id, outcome="next", run_s=0.1, artifacts={"bin": "x"}), "w/ö", 102.7
    )
    assert await _counters(store) == got
    lease = await store.lease("s2", "wörker/2", 103.3, 30.0)
    assert lease is not None and lease.request_id == "r0"
    detail = {"x": 0.1, "big": 1e16, "tiny": 2e-7, "text": 'é/ü "q"\n\u2028😀', "n": [1, 2.5]}
    result = Result(request_id="r0", status=Status.OK, score=1 / 3, detail=detail)
    await store.complete(
        Completion(lease_id=lease.lease_id, run_s=0.30000000000000004, result=result), "wörker/2", 104.1
    )
    got = await _counters(store)
    assert got["queued"] == {b1: "2", b2: "2", b3: "1"}
    assert got["bytes"] == {b1: await _sizes(store, "b1")}
    assert got["expiry"] == {b1: float("inf")}
    assert got["totals"] == {"queued": "5", "bytes": str(await _sizes(store, "b1"))}

    # r1, r2 and bob's q1 in one bundle: b1 completes with r2, bob's batch stays open
    leases = [await store.lease("s1", "w", 105.0, 30.0) for _ in range(3)]
    assert [le.request_id for le in leases if le is not None] == ["r1", "r2", "q1"]
    items = [
        Completion(lease_id=le.lease_id, run_s=0.25, result=Result(request_id=le.request_id,
                       status=Status.WRONG_ANSWER, detail={"i": i}))
        for i, le in enumerate(leases) if le is not None
    ]  # fmt: skip
    outs = await store.complete_many(items, "w", 106.0)
    assert [getattr(o, "batch_completed", None) for o in outs] == [False, True, False]
    bob_size = await _sizes(store, "bb", "bob/t")
    assert await _counters(store, "bob") == {
        "queued": {k.batch("bob/t", "bb"): "0"},
        "bytes": {k.batch("bob/t", "bb"): bob_size},
        "expiry": {k.batch("bob/t", "bb"): float("inf")},
        "totals": {"queued": "0", "bytes": str(bob_size)},
    }
    # r3 completes alone; r4 (stage "s1/x") is ended by the reaper, which completes b2
    lease = await store.lease("s1", "w", 107.0, 30.0)
    assert lease is not None and lease.request_id == "r3"
    await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=Result(request_id="r3", status=Status.OK)), "w", 107.5)  # fmt: skip
    lease = await store.lease("s1/x", "w", 108.0, 2.0)
    assert lease is not None and lease.request_id == "r4"
    assert await store.requeue_expired(111.0, max_attempts=1) == [("r4", "s1/x")]
    [r3, r4] = await store.batch_results(TASK, "b2")
    assert r4.status is Status.INTERNAL_ERROR and "s1/x" in r4.detail["error"]

    size1, size2 = await _sizes(store, "b1"), await _sizes(store, "b2")
    assert size2 == len(r3.model_dump_json()) + len(r4.model_dump_json())
    expected = {
        "queued": {b3: "1"},
        "bytes": {b1: size1, b2: size2},
        "expiry": {b1: 106.0 + TTL, b2: 111.0 + TTL},
        "totals": {"queued": "1", "bytes": str(size1 + size2)},
    }
    assert await _counters(store) == expected
    usage = TenantUsage(queued=1, result_bytes=size1 + size2, next_expiry=106.0 + TTL)
    assert await store.tenant_usage(TENANT, 112.0) == usage
    # the exact recount finds the same and has nothing to repair
    assert await store.tenant_usage(TENANT, 112.0, exact=True) == usage
    assert await _counters(store) == expected


@pytest.fixture
async def lua(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.Redis.from_url(str(redis_server.url))
    yield r
    await r.aclose()


async def _measure(r: aioredis.Redis, fn: str, conv: str, args: list[Any]) -> list[int]:
    """``fn`` of lib.lua applied to each argument (``conv``: how the argument is read)."""
    lib = resources.files("distrs.store").joinpath("lua", "lib.lua").read_text()
    body = f"local out = {{}}\nfor i = 1, #ARGV do out[i] = {fn}({conv}(ARGV[i])) end\nreturn out"
    script = r.register_script("local CLUSTER = false\n" + lib + "\n" + body)
    out: list[int] = []
    for i in range(0, len(args), 1000):
        out += await script(args=args[i : i + 1000])
    return out


async def test_lua_measures_floats_as_pydantic_writes_them(lua: aioredis.Redis) -> None:
    rng = random.Random(7)
    values = [0.0, -0.0, 1.0, -2.5, 100.0, 1e15, 1e16, 1e-5, 1e-6, 1.5e-5, 123456789012345.6]
    values += [1234567890123456.7, 5e-324, 1.7976931348623157e308, 1 / 3, 1.2000000000000028]
    for k in range(-323, 309):  # powers of ten and their neighbours (digits carried, notation)
        p = float(f"1e{k}")
        values += [p, math.nextafter(p, 0.0), math.nextafter(p, math.inf)]
    for _ in range(3000):
        kind = rng.random()
        if kind < 0.4:  # any finite double
            x = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
            if x != x or abs(x) == float("inf"):
                continue
        elif kind < 0.7:  # durations and scores of every magnitude
            x = rng.uniform(0, 100) * 10 ** rng.randint(-8, 18)
        else:  # short decimals
            x = round(rng.uniform(0, 1000), rng.randint(0, 6))
        values.append(x)
    got = await _measure(lua, "json_float_chars", "tonumber", [repr(v) for v in values])
    dump = TypeAdapter(float).dump_json
    assert got == [len(dump(v).decode()) for v in values]


async def test_lua_measures_strings_as_pydantic_writes_them(lua: aioredis.Redis) -> None:
    rng = random.Random(11)
    alphabet = 'a/"\\\b\f\n\r\t\x00\x1f\x7fé\u2028😀中'
    texts = ["", "plain"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(2000)]
    got = await _measure(lua, "json_str_chars", "", [t.encode() for t in texts])
    dump = TypeAdapter(str).dump_json
    assert got == [len(dump(t).decode()) for t in texts]
