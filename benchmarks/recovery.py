"""Recovery figures of the live service: how long a fault or a cold start delays a batch.

Real processes (``distrs proxy`` over a real ``redis-server`` with AOF; ``distrs worker``
processes), driven over HTTP as a trainer would, with the
service's default lease TTL and heartbeat period unless the environment overrides them:

1. **Lost lease.** A batch of ``synthetic`` requests (1 s compile, 0.5 s execute) on two compile
   and two execute workers. As soon as a compile worker holds a lease (read from the store), it is
   (a) stopped with SIGSTOP for 10 s and then continued, or (b) killed with SIGKILL. Reported:
   the batch's completion time after submission (next to a fault-free baseline) and after the
   fault began (the lost worker's capacity is part of it: the other compile worker runs the rest).
2. **New task behind a busy tenant.** Tenant B keeps a deep queue (a task with history: two
   finished 30-request batches, then a third like them). Tenant A then registers a new task, with no history,
   and a four-request batch. Reported: A's first-batch completion time (its wait behind B).

    .venv/bin/python benchmarks/recovery.py      # writes benchmarks/results/recovery.{json,md}

Nothing here is asserted: these are the figures the fault-recovery work is judged by.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distrs.config import ProxySettings, StoreSettings  # noqa: E402
from distrs.store.factory import create_store  # noqa: E402
from distrs.store.keys import Keys  # noqa: E402
from tests.fixtures.redis_server import RedisServer  # noqa: E402
from tests.fixtures.service import TRAINER_A, TRAINER_B, Service, running_service  # noqa: E402

BATCH = 8
DURATIONS = {"compile": 1.0, "execute": 0.5}
BUSY = 30
BUSY_DURATIONS = {"compile": 0.5, "execute": 0.1}
_DEFAULTS = ProxySettings.model_fields
# The service's own defaults (the test fixture shortens the lease TTL), unless the caller sets them.
ENV = {
    "DISTRS_LEASE_TTL_S": os.environ.get("DISTRS_LEASE_TTL_S", str(_DEFAULTS["lease_ttl_s"].default)),
    "DISTRS_REAPER_INTERVAL_S": os.environ.get(
        "DISTRS_REAPER_INTERVAL_S", str(_DEFAULTS["reaper_interval_s"].default)
    ),
}


@contextlib.contextmanager
def redis() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        raise SystemExit("benchmarks/recovery.py needs redis-server (it reads lease holders from the store)")
    with tempfile.TemporaryDirectory(prefix="distrs-bench-redis-") as d:
        server = RedisServer(Path(d), appendfsync="everysec")
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


def requests(task: str, batch: str, n: int, durations: dict[str, float]) -> list[dict[str, Any]]:
    payload = {"durations": durations, "fail_stage": None, "status": "ok"}
    return [
        {
            "task": task,
            "batch_id": batch,
            "request_id": f"{batch}-{i}",
            "reward_type": "synthetic",
            "payload": payload,
        }
        for i in range(n)
    ]


def submit(c: httpx.Client, task: str, batch: str, n: int, durations: dict[str, float]) -> float:
    r = c.post("/v1/batches", json={"task": task, "batch_id": batch, "size": n, "reward_type": "synthetic"})
    assert r.status_code in (200, 201), r.text
    t0 = time.monotonic()
    r = c.post("/v1/requests", json={"requests": requests(task, batch, n, durations)})
    assert r.status_code == 202, r.text
    return t0


def wait_complete(c: httpx.Client, task: str, batch: str, cap_s: float = 300.0) -> dict[str, Any]:
    end = time.monotonic() + cap_s
    while time.monotonic() < end:
        r = c.get(f"/v1/batches/{task}/{batch}/results", params={"wait_s": 10})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["complete"]:
            return body
    raise RuntimeError(f"{task}/{batch} not complete in {cap_s}s")


async def lease_holder(redis_url: str, svc: Service) -> subprocess.Popen[bytes]:
    """The compile worker process holding a lease: the live lease ids from the store's lease
    index, each lease's worker id (``HOST-PID...``) matched against the worker processes."""
    store = create_store(StoreSettings(redis_url=redis_url))
    client = Redis.from_url(redis_url)
    try:
        for _ in range(1000):
            for key in await client.zrange(Keys().leases(), 0, -1):  # lease keys, by deadline
                lease = await store.get_lease(key.decode().rsplit(":", 1)[1])
                for p in svc.workers:
                    if lease is not None and lease.stage == "compile" and f"-{p.pid}" in lease.worker_id:
                        return p
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()
        await store.close()
    raise RuntimeError("no compile worker took a lease")


def lost_lease(redis_url: str, fault: str) -> dict[str, float]:
    """Completion of one batch with ``fault`` applied to a lease-holding compile worker: seconds
    after submission, and seconds after the fault began."""
    with (
        running_service(workers={"compile": 2, "execute": 2}, redis_url=redis_url, env=ENV) as svc,
        svc.client() as c,
    ):
        submit(c, "warm", "w0", 2, {"compile": 0.1, "execute": 0.1})  # workers are up and polling
        wait_complete(c, "warm", "w0")
        task = f"lease-{fault}"
        t0 = submit(c, task, "b0", BATCH, DURATIONS)
        victim = asyncio.run(lease_holder(redis_url, svc))
        t_fault = time.monotonic()
        if fault == "sigstop_10s":
            os.killpg(victim.pid, signal.SIGSTOP)
            time.sleep(10)
            os.killpg(victim.pid, signal.SIGCONT)
        elif fault == "sigkill":
            os.killpg(victim.pid, signal.SIGKILL)
        body = wait_complete(c, task, "b0")
        end = time.monotonic()
        statuses = sorted({r["status"] for r in body["results"]})
        assert body["done"] == BATCH and statuses == ["ok"], (body["done"], statuses)
        return {"complete_s": round(end - t0, 2), "after_fault_s": round(end - t_fault, 2)}


def new_task_wait(redis_url: str) -> dict[str, float]:
    with running_service(workers={"compile": 2, "execute": 2}, redis_url=redis_url, env=ENV) as svc:
        b, a = svc.client(TRAINER_B), svc.client(TRAINER_A)
        with b, a:
            for i in range(2):  # tenant B's task gets a history of batches like the next one
                submit(b, "busy", f"h{i}", BUSY, BUSY_DURATIONS)
                wait_complete(b, "busy", f"h{i}")
            t_busy = submit(b, "busy", "big", BUSY, BUSY_DURATIONS)
            time.sleep(0.5)
            t_new = submit(a, "fresh", "first", 4, {"compile": 0.2, "execute": 0.1})
            wait_complete(a, "fresh", "first")
            new_s = time.monotonic() - t_new
            wait_complete(b, "busy", "big")
            return {
                "new_task_first_batch_s": round(new_s, 2),
                "busy_batch_s": round(time.monotonic() - t_busy, 2),
            }


def render_md(r: dict[str, Any]) -> str:
    ll = r["lost_lease"]
    lines = [
        "# Recovery",
        "",
        f"{r['machine']}; store: {r['store']}; lease TTL {r['lease_ttl_s']} s; batch of {BATCH} synthetic "
        f"requests (compile {DURATIONS['compile']} s, execute {DURATIONS['execute']} s), 2 + 2 workers.",
        "",
        "| lost lease | batch complete after submission (s) | after the fault began (s) |",
        "|---|---|---|",
    ]
    for k in ("baseline", "sigstop_10s", "sigkill"):
        after = ll[k]["after_fault_s"] if k != "baseline" else "-"
        lines.append(f"| {k} | {ll[k]['complete_s']} | {after} |")
    nt = r["new_task"]
    lines += [
        "",
        "| new task (no history) behind a busy tenant | s |",
        "|---|---|",
        f"| first batch (4 requests) complete after submission | {nt['new_task_first_batch_s']} |",
        f"| the busy tenant's {BUSY}-request batch (history: two like it), for scale | {nt['busy_batch_s']} |",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    with redis() as url:
        ll = {f: lost_lease(url, f) for f in ("baseline", "sigstop_10s", "sigkill")}
        nt = new_task_wait(url)
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "store": "redis (AOF everysec)",
        "lease_ttl_s": float(ENV["DISTRS_LEASE_TTL_S"]),
        "lost_lease": ll,
        "new_task": nt,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "recovery.md").write_text(render_md(result))
    print(render_md(result))


if __name__ == "__main__":
    main()
