"""Recovery figures of the live service: how long a fault or a cold start delays a batch.

Real processes (``distrs proxy`` over a real ``redis-server`` with AOF; ``distrs worker``
processes), driven over HTTP as a trainer would, with the
service's default lease TTL and heartbeat period unless the environment overrides them:

1. **Lost lease.** A batch of ``synthetic`` requests (1 s compile, 0.5 s execute) on two compile
   and two execute workers. As soon as a compile worker holds a lease (read from the store), it is
   (a) stopped with SIGSTOP for 10 s and then continued, or (b) killed with SIGKILL. Reported
   (median and worst of ``--repeat`` runs): the batch's completion after submission (next to a
   fault-free baseline) and after the fault began, watched while the fault lasts. The lost
   worker's capacity is part of it: from the fault on, the other compile worker runs all eight
   compiles, so no recovery can finish before ``BATCH × compile + execute`` = 8.5 s after the
   fault (the *capacity floor*); the target is the batch within 10 s of the fault. Also
   reported: when the store requeued the lost requests (its ``lease_expired`` events), which is
   what the lease timing decides; ``--compare-former`` runs the faults with the former timing
   (TTL 6 s, sweep 0.5 s) too, interleaved.
2. **New task beside a busy tenant.** Tenant B has a task with history (two finished 30-request
   batches) and registers a third like them; 0.5 s later tenant A registers a new task, with no
   history, and a four-request batch. Reported: each batch's extra delay d = completion − T, T
   its earliest possible completion (Eq. 1-2), and the new batch's completion after submission.
   Run twice: (a) on a fixed pool of 2 + 2 workers with no planner, and (b) as DistRS runs, with
   the planner (``distrs planner``, local actuator) sizing the pools. The target is the paper's
   batch-level constraint for the new task: d ≤ D (``max_extra_delay_s``, 1 s) in (b). In (a)
   the new batch queues behind B by design: B's batch has the earlier T, and EBF (Sec. 5.2)
   serves the earliest T first; only scaling (Alg. 1-2 at the new batch's arrival) can keep
   both batches within T + D.

    .venv/bin/python benchmarks/recovery.py --compare-former   # writes benchmarks/results/recovery.{json,md}

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
import statistics
import subprocess
import sys
import tempfile
import threading
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
from tests.fixtures.service import (  # noqa: E402
    TRAINER_A,
    TRAINER_B,
    WORKER,
    Service,
    free_port,
    running_service,
    stop_process,
    wait_http,
)

BATCH = 8
DURATIONS = {"compile": 1.0, "execute": 0.5}
BUSY = 30
BUSY_DURATIONS = {"compile": 0.5, "execute": 0.1}
NEW = 4
NEW_DURATIONS = {"compile": 0.2, "execute": 0.1}
STOP_S = 10.0
CAPACITY_FLOOR_S = BATCH * DURATIONS["compile"] + DURATIONS["execute"]
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


async def lease_holder(redis_url: str, svc: Service) -> tuple[subprocess.Popen[bytes], set[str]]:
    """A compile worker process holding a lease, and the request ids it holds (a bundle may hold
    several): the live lease ids from the store's lease index, each lease's worker id
    (``HOST-PID...``) matched against the worker processes."""
    store = create_store(StoreSettings(redis_url=redis_url))
    client = Redis.from_url(redis_url)
    try:
        for _ in range(1000):
            held: dict[int, set[str]] = {}
            for key in await client.zrange(Keys().leases(), 0, -1):  # lease keys, by deadline
                lease = await store.get_lease(key.decode().rsplit(":", 1)[1])
                for p in svc.workers:
                    if lease is not None and lease.stage == "compile" and f"-{p.pid}" in lease.worker_id:
                        held.setdefault(p.pid, set()).add(lease.request_id)
            for p in svc.workers:
                if p.pid in held:
                    return p, held[p.pid]
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()
        await store.close()
    raise RuntimeError("no compile worker took a lease")


async def expiries(redis_url: str, task: str) -> list[float]:
    """Times of the store's ``lease_expired`` events of ``task`` (the reaper's requeues)."""
    client = Redis.from_url(redis_url)
    try:
        out = []
        for _, f in await client.xrange(Keys().events(), "-", "+"):
            if f.get(b"type") == b"lease_expired" and f.get(b"task") == task.encode():
                out.append(float(f[b"ts"]))
        return out
    finally:
        await client.aclose()


# The lease timing before the current defaults, measured beside them (``--compare-former``).
FORMER = {"DISTRS_LEASE_TTL_S": "6.0", "DISTRS_REAPER_INTERVAL_S": "0.5"}


def lost_lease(redis_url: str, fault: str, run: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """Completion of one batch with ``fault`` applied to a lease-holding compile worker: seconds
    after submission, and seconds after the fault began. ``run`` keeps each run's names apart
    (the store is shared, and a resubmitted batch would only be a duplicate)."""
    with (
        running_service(workers={"compile": 2, "execute": 2}, redis_url=redis_url, env=env or ENV) as svc,
        svc.client() as c,
    ):
        warm = f"w{run}-{fault}" + ("-former" if env else "")
        submit(c, "warm", warm, 2, {"compile": 0.1, "execute": 0.1})  # workers are up and polling
        wait_complete(c, "warm", warm)
        task = f"lease-{fault}-{run}" + ("-former" if env else "")
        t0 = submit(c, task, "b0", BATCH, DURATIONS)
        victim, lost = asyncio.run(lease_holder(redis_url, svc))
        t_fault, wall_fault = time.monotonic(), time.time()
        resume: threading.Thread | None = None
        if fault == "sigstop_10s":
            os.killpg(victim.pid, signal.SIGSTOP)
            # continued 10 s later, while the batch is watched: it may well finish before that
            resume = threading.Timer(STOP_S, os.killpg, (victim.pid, signal.SIGCONT))
            resume.start()
        elif fault == "sigkill":
            os.killpg(victim.pid, signal.SIGKILL)
        body = wait_complete(c, task, "b0")
        end = time.monotonic()
        if resume is not None:
            resume.join()
        statuses = sorted({r["status"] for r in body["results"]})
        assert body["done"] == BATCH and statuses == ["ok"], (body["done"], statuses)
        expired = asyncio.run(expiries(redis_url, f"tenant-a/{task}"))
        return {
            "complete_s": round(end - t0, 2),
            "after_fault_s": round(end - t_fault, 2),
            "lost_requests": float(len(lost)) if fault != "baseline" else 0.0,
            # the store's lease_expired events (wall clock): when the lost requests were requeued
            "requeued_after_fault_s": round(max(expired) - wall_fault, 2) if expired else 0.0,
        }


@contextlib.contextmanager
def planner(svc: Service, redis_url: str) -> Iterator[None]:
    """``distrs planner`` with the local actuator: it starts and sizes the worker pools of
    ``svc`` (worker threads in one host process per stage), as ``distrs up`` does."""
    env = {
        **svc.env,
        "DISTRS_TOKEN": WORKER,  # the local actuator's workers inherit it
        "DISTRS_REWARD_TYPES": "synthetic",  # no GPU here: execute workers serve synthetic only
        "DISTRS_METRICS_PORT": str(metrics_port := free_port()),
    }
    cmd = [sys.executable, "-m", "distrs.cli", "planner", "--redis", redis_url, "--actuator", "local"]
    cmd += ["--proxy", svc.url, "--log-level", "warning"]
    with open(svc.workdir / "planner.log", "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/healthz", proc=proc)
        yield
    finally:
        stop_process(proc, timeout_s=30)


def batch_delay(c: httpx.Client, task: str, batch: str) -> float:
    body = wait_complete(c, task, batch)
    return float(body["extra_delay_s"])


def new_task_wait(redis_url: str, scaled: bool, run: int) -> dict[str, float]:
    """Tenant B's third busy batch and, 0.5 s later, tenant A's new task (no history); task
    names are new in every ``run``."""
    fixed = {} if scaled else {"compile": 2, "execute": 2}
    with running_service(workers=fixed, redis_url=redis_url, env=ENV) as svc:
        ctx = planner(svc, redis_url) if scaled else contextlib.nullcontext()
        b, a = svc.client(TRAINER_B), svc.client(TRAINER_A)
        with ctx, b, a:
            busy, fresh = f"busy-{run}-{int(scaled)}", f"fresh-{run}-{int(scaled)}"
            for i in range(2):  # tenant B's task gets a history of batches like the next one
                submit(b, busy, f"h{i}", BUSY, BUSY_DURATIONS)
                wait_complete(b, busy, f"h{i}")
            submit(b, busy, "big", BUSY, BUSY_DURATIONS)
            time.sleep(0.5)
            t_new = submit(a, fresh, "first", NEW, NEW_DURATIONS)
            d_new = batch_delay(a, fresh, "first")
            new_s = time.monotonic() - t_new
            d_busy = batch_delay(b, busy, "big")
            return {
                "new_task_extra_delay_s": round(d_new, 2),
                "new_task_first_batch_s": round(new_s, 2),
                "busy_extra_delay_s": round(d_busy, 2),
            }


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = runs[0].keys()
    return {
        "median": {k: round(statistics.median(r[k] for r in runs), 2) for k in keys},
        "worst": {k: round(max(r[k] for r in runs), 2) for k in keys},
        "runs": runs,
    }


def render_md(r: dict[str, Any]) -> str:
    ll = r["lost_lease"]
    n = len(ll["baseline"]["runs"])
    lines = [
        "# Recovery",
        "",
        f"{r['machine']}; load average {r['load_average']}; store: {r['store']}; lease TTL "
        f"{r['lease_ttl_s']} s (heartbeat every {r['heartbeat_s']} s), expiry sweep every "
        f"{r['reaper_interval_s']} s. Median (worst) of {n} runs.",
        "",
        f"Lost lease: a batch of {BATCH} synthetic requests (compile {DURATIONS['compile']} s, execute "
        f"{DURATIONS['execute']} s) on 2 + 2 workers; a compile worker holding a lease is stopped "
        f"(SIGSTOP for {STOP_S:g} s) or killed. Target: the batch complete within 10 s of the fault; "
        f"capacity floor {CAPACITY_FLOOR_S:g} s (the other compile worker runs all {BATCH} compiles). "
        "A lost request is requeued when its lease has expired (lease TTL plus at most one sweep) "
        "and runs as soon as a compile worker is free.",
        "",
        "| lost lease | batch complete after submission (s) | after the fault began (s) "
        "| lost requests requeued after the fault (s) | requests the worker held, per run |",
        "|---|---|---|---|---|",
    ]
    for k in ll:
        med, worst = ll[k]["median"], ll[k]["worst"]
        cells = [f"{med[f]} ({worst[f]})" for f in ("after_fault_s", "requeued_after_fault_s")]
        if k == "baseline":
            cells = ["-", "-"]
        held = "-" if k == "baseline" else " ".join(f"{r['lost_requests']:g}" for r in ll[k]["runs"])
        lines.append(
            f"| {k} | {med['complete_s']} ({worst['complete_s']}) | " + " | ".join(cells) + f" | {held} |"
        )
    lines += [
        "",
        f"New task: tenant B's third {BUSY}-request batch (compile {BUSY_DURATIONS['compile']} s, execute "
        f"{BUSY_DURATIONS['execute']} s; two like it in its history), then 0.5 s later tenant A's new task "
        f"(no history) with {NEW} requests (compile {NEW_DURATIONS['compile']} s, execute "
        f"{NEW_DURATIONS['execute']} s). d = completion − T (T: earliest possible completion, Eq. 1-2). "
        "Target: the new task's d ≤ D = 1 s when the planner sizes the pools.",
        "",
        "| new task beside a busy tenant | new task's d (s) | new task complete after submission (s) "
        "| busy batch's d (s) |",
        "|---|---|---|---|",
    ]
    for k, label in (("fixed", "fixed 2 + 2 workers, no planner"), ("planner", "planner sizes the pools")):
        med, worst = r["new_task"][k]["median"], r["new_task"][k]["worst"]
        cells = [f"{med[f]} ({worst[f]})" for f in NEW_FIELDS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


NEW_FIELDS = ("new_task_extra_delay_s", "new_task_first_batch_s", "busy_extra_delay_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--repeat", type=int, default=3, help="Runs of each scenario (median and worst).")
    ap.add_argument(
        "--compare-former",
        action="store_true",
        help="Also run the lost-lease faults with the former lease timing (TTL 6 s, sweep 0.5 s).",
    )
    args = ap.parse_args()
    faults = ("baseline", "sigstop_10s", "sigkill")
    former = ("sigstop_10s", "sigkill") if args.compare_former else ()
    with redis() as url:
        ll_runs: dict[str, list[dict[str, float]]] = {f: [] for f in faults}
        ll_runs |= {f"{f} (former: TTL 6 s, sweep 0.5 s)": [] for f in former}
        nt_runs: dict[str, list[dict[str, float]]] = {"fixed": [], "planner": []}
        for run in range(args.repeat):  # interleaved, so a busy spell of the machine hits all alike
            for f in faults:
                ll_runs[f].append(lost_lease(url, f, run))
            for f in former:
                ll_runs[f"{f} (former: TTL 6 s, sweep 0.5 s)"].append(
                    lost_lease(url, f, run, {**ENV, **FORMER})
                )
            for k in nt_runs:
                nt_runs[k].append(new_task_wait(url, k == "planner", run))
    ttl = float(ENV["DISTRS_LEASE_TTL_S"])
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "store": "redis (AOF everysec)",
        "lease_ttl_s": ttl,
        "heartbeat_s": round(ttl / 3, 3),
        "reaper_interval_s": float(ENV["DISTRS_REAPER_INTERVAL_S"]),
        "capacity_floor_s": CAPACITY_FLOOR_S,
        "lost_lease": {f: summary(runs) for f, runs in ll_runs.items()},
        "new_task": {k: summary(runs) for k, runs in nt_runs.items()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "recovery.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "recovery.md").write_text(render_md(result))
    print(render_md(result))


if __name__ == "__main__":
    main()
