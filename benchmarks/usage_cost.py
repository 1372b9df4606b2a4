"""What the per-tenant usage accounting (``store/redis/usage.py``) costs Redis per lifecycle.

The Redis store with the accounting (``RedisStore``) against the same store without it (its keys
give the scripts no usage counter keys, so they move no counters: standalone, the scripts move
them themselves), side by side and alternating, against one fresh ``redis-server`` (no persistence,
so that only the commands are compared): batches of 1,000 registered, submitted in bulk, leased
and completed one at a time and in bundles of 32, results read. Per lifecycle it reports the
Redis commands processed (``INFO stats``: deterministic, so valid on a busy machine; a script
counts as one command however many it runs inside), the Redis server's CPU (``INFO cpu``), this
client's CPU (the store's Python, ``time.process_time``) and its lifecycles per second (noisy).

    .venv/bin/python benchmarks/usage_cost.py [--requests 5000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import redis.asyncio as aredis

from distrs.config import StoreSettings
from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.store.base import NewRequest
from distrs.store.keys import Keys
from distrs.store.redis import RedisStore
from distrs.store.redis.client import connect
from distrs.store.redis.topology import Topology

BATCH = 1000


class _NoUsageKeys(Keys):
    """Keys whose scripts are told not to move usage counters."""

    def usage_prefixes(self) -> tuple[str, str, str, str]:
        return ("", "", "", "")


def _store(url: str, accounting: bool) -> RedisStore:
    """The standalone Redis store, with or without its usage accounting."""
    settings = StoreSettings.model_validate({"redis_url": url})
    ns = f"u-{uuid.uuid4().hex[:8]}"
    keys = Keys(ns) if accounting else _NoUsageKeys(ns)
    return RedisStore(Topology(connect(url, settings), settings, keys))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(accounting: bool, url: str, n: int, bundle: int) -> tuple[float, float, float, float]:
    store = _store(url, accounting)
    await store.start()
    r = aredis.from_url(url, decode_responses=True)

    async def counters() -> tuple[int, float]:
        stats, cpu = await r.info("stats"), await r.info("cpu")
        return int(stats["total_commands_processed"]), float(cpu["used_cpu_sys"]) + float(
            cpu["used_cpu_user"]
        )

    now = 1000.0
    c0, cpu0 = await counters()
    t0, p0 = time.perf_counter(), time.process_time()
    for b in range(n // BATCH):
        bid = f"b{b}"
        await store.register_batch(BatchInfo(tenant="a", task="a/t", batch_id=bid, size=BATCH), now)
        news = [
            NewRequest(
                tenant="a",
                task="a/t",
                batch_id=bid,
                request_id=f"{bid}-{i}",
                reward_type="synthetic",
                route=["s"],
                payload={"x": 1},
            )
            for i in range(BATCH)
        ]
        await store.submit(news, now)
        while leases := await store.lease_many("s", "w", now, 30.0, bundle):
            results = [Result(request_id=x.request_id, status=Status.OK, score=1.0) for x in leases]
            if bundle == 1:
                await store.complete(
                    Completion(lease_id=leases[0].lease_id, run_s=0.1, result=results[0]), "w", now
                )
            else:
                items = [
                    Completion(lease_id=x.lease_id, result=res)
                    for x, res in zip(leases, results, strict=True)
                ]
                await store.complete_many(items, "w", now)
        await store.batch_results("a/t", bid)
    wall, client = time.perf_counter() - t0, time.process_time() - p0
    c1, cpu1 = await counters()
    await store.flush_namespace()
    await store.close()
    await r.aclose()
    done = n // BATCH * BATCH
    return (c1 - c0) / done, (cpu1 - cpu0) / done * 1e6, client / done * 1e6, done / wall


async def main(args: argparse.Namespace) -> None:
    port, work = _free_port(), tempfile.mkdtemp()
    server = shutil.which("redis-server") or "redis-server"
    proc = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    try:
        await asyncio.sleep(0.5)
        print(
            "| leases per call | accounting | Redis commands / lifecycle | Redis CPU µs / lifecycle "
            "| client CPU µs / lifecycle | lifecycles/s |"
        )
        print("|---|---|---|---|---|---|")
        for bundle in (1, 32):
            for _ in range(args.rounds):
                for name, accounting in (("off", False), ("on", True)):
                    cmds, cpu_us, client_us, rate = await _run(accounting, url, args.requests, bundle)
                    print(
                        f"| {bundle} | {name} | {cmds:.2f} | {cpu_us:.0f} | {client_us:.0f} | {rate:.0f} |",
                        flush=True,
                    )
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000, help="Lifecycles per run (whole batches of 1,000).")
    ap.add_argument("--rounds", type=int, default=2, help="Runs of each variant, alternating.")
    asyncio.run(main(ap.parse_args()))
