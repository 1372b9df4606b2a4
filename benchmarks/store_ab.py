"""Before/after of the Redis store: this tree's against an older revision's, interleaved.

The older revision is exported with ``git archive`` into a temporary folder; both trees run on
the same interpreter and installed libraries, and take turns, ``--rounds`` times each:

1. **The store alone**: the tree's own ``benchmarks/usage_cost.py`` (it is written against its
   tree's store API), on a fresh ``redis-server`` without persistence: batches of 1,000
   registered, submitted in bulk, leased and completed one at a time and in bundles of 32,
   results read, with the usage accounting and without. Per lifecycle: Redis commands
   (``INFO stats``: deterministic, so valid on a busy machine), the Redis server's CPU, the
   client's CPU (the store's Python, ``time.process_time``) and lifecycles/s.
2. **Through the proxy**: the tree's ``distrs proxy`` over one ``redis-server`` (AOF with
   ``appendfsync everysec``, as ``proxy_load``; flushed before each run) driven by ``proxy_load``'s load generator over HTTP (register, bulk submit,
   lease, complete, the results read with the long-poll): one stage, one lease per call (64
   workers) and bundles of 32 (8 workers); and two stages (``compile`` then ``execute``: a
   ``next`` completion, then a ``final`` one), one lease per call, with two proxies behind a
   round robin, so that a lease is completed through another proxy than the one that handed it
   out, as behind a load balancer. Per lifecycle: Redis commands (the workers' idle long-polls
   at the end included, so this one is not exactly deterministic), the Redis server's CPU and
   the proxies' CPU.

    .venv/bin/python benchmarks/store_ab.py --base REV   # writes benchmarks/results/store_ab.{json,md}

Not part of ``run_all``: it compares with history rather than measuring a target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import proxy_load as pl  # noqa: E402

from tests.fixtures.redis_server import RedisServer  # noqa: E402  (proxy_load put the root on the path)

# usage_cost.py's table: leases per call, accounting, commands, Redis CPU µs, client CPU µs, rate
_USAGE_FIELDS = ("redis_commands", "redis_cpu_us", "client_cpu_us", "lifecycles_per_s")


class TreeProxy(pl.Proxy):
    """``distrs proxy`` over Redis, run from the source tree ``root``."""

    def __init__(self, root: Path, redis_url: str, work: Path) -> None:
        super().__init__(redis_url, work)
        self.root = root

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
        env.update({"DISTRS_MAX_BULK": "4096", "DISTRS_REDIS_URL": str(self.redis_url)})
        env["PYTHONPATH"] = str(self.root)
        cmd = [sys.executable, "-m", "distrs.cli", "proxy", "--port", str(self.port), "--insecure"]
        log = open(self.workdir / f"proxy-{self.port}.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "warning"], env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT
        )
        pl.wait_ready(self.proc, self.port, log.name)


def store_alone(root: Path, n: int) -> dict[str, dict[str, float]]:
    """The tree's own ``usage_cost.py``, one round: ``{"<leases per call>/<on|off>": figures}``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "usage_cost.py"), "--requests", str(n), "--rounds", "1"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows: dict[str, dict[str, float]] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].isdigit():
            rows[f"{cells[0]}/{cells[1]}"] = dict(zip(_USAGE_FIELDS, map(float, cells[2:]), strict=True))
    return rows


async def _two_stage_worker(
    ports: list[int], i: int, stage: str, stop: asyncio.Event, stats: dict[str, int]
) -> None:
    """Lease at ``stage`` through one proxy, complete through the next one (round robin)."""
    wid = f"{stage}-{i}"
    lease_c = pl.Http("127.0.0.1", ports[i % len(ports)])
    done_c = pl.Http("127.0.0.1", ports[(i + 1) % len(ports)])
    body_lease = {"stage": stage, "worker_id": wid, "wait_s": 0.5}
    if stage == "compile":
        done: dict[str, Any] = {"worker_id": wid, "outcome": "next", "artifacts": {"so": "x"}, "run_s": 0.0}
    else:
        done = {"worker_id": wid, "outcome": "final", "result": {"status": "ok", "score": 1.0}, "run_s": 0.0}
    try:
        while not stop.is_set():
            status, raw = await lease_c.call("POST", "/v1/leases", body_lease)
            if status == 204:
                continue
            if status != 200:
                stats["errors"] += 1
                continue
            lease_id = pl.orjson.loads(raw)["lease_id"]
            status, _ = await done_c.call("POST", f"/v1/leases/{lease_id}/complete", done)
            if status != 200:
                stats["errors"] += 1
    finally:
        await lease_c.close()
        await done_c.close()


async def two_stages(
    ports: list[int], n: int, batch_size: int, workers: int, inflight: int, task: str
) -> dict[str, Any]:
    """Lifecycles of a two-stage route through ``ports`` (``workers`` per stage)."""
    stop = asyncio.Event()
    stats = {"errors": 0}
    loops = [
        asyncio.create_task(_two_stage_worker(ports, i, stage, stop, stats))
        for stage in ("compile", "execute")
        for i in range(workers)
    ]
    payload = {"durations": {"compile": 0.001, "execute": 0.001}, "fail_stage": None, "status": "ok"}
    sem = asyncio.Semaphore(inflight)

    async def one_batch(b: int) -> None:
        c = pl.Http("127.0.0.1", ports[b % len(ports)])
        try:
            st, raw = await c.call(
                "POST", "/v1/batches", {"task": task, "batch_id": f"b{b}", "size": batch_size}
            )
            assert st == 201, raw
            reqs = [
                {"task": task, "batch_id": f"b{b}", "request_id": f"b{b}-{i}", "reward_type": "synthetic",
                 "payload": payload}
                for i in range(batch_size)
            ]  # fmt: skip
            st, raw = await c.call("POST", "/v1/requests", {"requests": reqs})
            assert st == 202 and pl.orjson.loads(raw)["accepted"] == batch_size, raw
            while True:
                st, raw = await c.call("GET", f"/v1/batches/{task}/b{b}/results?wait_s=30")
                body = pl.orjson.loads(raw)
                if body["complete"]:
                    assert len(body["results"]) == batch_size
                    return
        finally:
            await c.close()
            sem.release()

    t0 = time.perf_counter()
    batches = []
    for b in range(n // batch_size):
        await sem.acquire()
        batches.append(asyncio.create_task(one_batch(b)))
    await asyncio.gather(*batches)
    elapsed = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*loops)
    done = n // batch_size * batch_size
    return {"requests": done, "lifecycles_per_s": round(done / elapsed, 1), "http_errors": stats["errors"]}


async def _measured(proxies: list[TreeProxy], redis_port: int, run: Any) -> dict[str, Any]:
    pl._redis_cmd(redis_port, "FLUSHALL")
    cpu0 = sum(p.cpu_s() for p in proxies)
    rcpu0, rcmd0 = pl._redis_cpu_s(redis_port), pl._redis_commands(redis_port)
    out: dict[str, Any] = await run
    n = out["requests"]
    cpu = sum(p.cpu_s() for p in proxies) - cpu0
    rcpu, rcmd = pl._redis_cpu_s(redis_port) - rcpu0, pl._redis_commands(redis_port) - rcmd0
    return {
        "lifecycles_per_s": out["lifecycles_per_s"],
        "http_errors": out["http_errors"],
        "redis_commands": round(rcmd / n, 2),
        "redis_cpu_ms": round(1000 * rcpu / n, 4),
        "proxy_cpu_ms": round(1000 * cpu / n, 3),
    }


async def through_proxy(root: Path, redis: RedisServer, work: Path, n: int) -> dict[str, dict[str, Any]]:
    """The three proxy runs (module docstring) of the tree ``root``."""
    out: dict[str, dict[str, Any]] = {}
    pl._redis_cmd(redis.port, "FLUSHALL")
    a, b = TreeProxy(root, redis.url, work), TreeProxy(root, redis.url, work)
    a.start()
    try:
        b.start()
        # warm-up: import paths, script cache, connection pools
        await pl.phase_throughput(a.port, 2000, 1000, 64, 2, "warm")
        await two_stages([a.port, b.port], 2000, 1000, 16, 2, "warm2")
        out["one"] = await _measured([a], redis.port, pl.phase_throughput(a.port, n, 1000, 64, 4, "one"))
        out["bundle"] = await _measured(
            [a], redis.port, pl.phase_throughput(a.port, n, 1000, 8, 4, "bundle", bundle=32)
        )
        out["two_stages"] = await _measured(
            [a, b], redis.port, two_stages([a.port, b.port], n, 1000, 32, 4, "two")
        )
    finally:
        a.stop()
        b.stop()
    return out


def _mean(runs: list[tuple[str, dict[str, Any]]], name: str) -> dict[str, Any]:
    mine = [r for n, r in runs if n == name]
    return {
        part: {
            row: {k: round(sum(r[part][row][k] for r in mine) / len(mine), 4) for k in mine[0][part][row]}
            for row in mine[0][part]
        }
        for part in ("store_alone", "proxy")
    }


def _markdown(res: dict[str, Any]) -> str:
    m = res["means"]
    b, a = m["before"], m["after"]
    lines = [
        f"# Redis store: {res['base']} before, this tree after, interleaved",
        "",
        f"{res['rounds']} rounds each. Load average at the start {res['load_average_at_start']}, at the end "
        f"{res['load_average_at_end']} (a shared 2-core machine: Redis commands are the steady figure; "
        "CPU per lifecycle next; lifecycles/s is noisy).",
        "",
        "## The store alone (`usage_cost.py`, standalone Redis, means)",
        "",
        "| leases per call | usage accounting | Redis commands / lifecycle | Redis CPU µs / lifecycle "
        "| client CPU µs / lifecycle | lifecycles/s |",
        "|---|---|---|---|---|---|",
    ]
    for row in b["store_alone"]:
        k, acc = row.split("/")
        f0, f1 = b["store_alone"][row], a["store_alone"][row]
        lines.append(
            f"| {k} | {acc} | {f0['redis_commands']:.2f} -> {f1['redis_commands']:.2f} "
            f"| {f0['redis_cpu_us']:.0f} -> {f1['redis_cpu_us']:.0f} "
            f"| {f0['client_cpu_us']:.0f} -> {f1['client_cpu_us']:.0f} "
            f"| {f0['lifecycles_per_s']:.0f} -> {f1['lifecycles_per_s']:.0f} |"
        )
    lines += [
        "",
        "## Through the proxy (standalone Redis, means)",
        "",
        "| run | Redis commands / lifecycle | Redis CPU ms / lifecycle | proxy CPU ms / lifecycle "
        "| lifecycles/s |",
        "|---|---|---|---|---|",
    ]
    names = {
        "one": "one stage, one lease per call (64 workers)",
        "bundle": "one stage, bundles of 32 (8 workers)",
        "two_stages": "two stages (`next`, then `final`), lease and completion through different proxies",
    }
    for row, label in names.items():
        f0, f1 = b["proxy"][row], a["proxy"][row]
        lines.append(
            f"| {label} | {f0['redis_commands']:.2f} -> {f1['redis_commands']:.2f} "
            f"| {f0['redis_cpu_ms']:.3f} -> {f1['redis_cpu_ms']:.3f} "
            f"| {f0['proxy_cpu_ms']:.3f} -> {f1['proxy_cpu_ms']:.3f} "
            f"| {f0['lifecycles_per_s']:.0f} -> {f1['lifecycles_per_s']:.0f} |"
        )
    lines += ["", "## Every run", ""]
    for i, (name, r) in enumerate(res["runs"]):
        lines.append(f"{i + 1}. {name}: `{json.dumps(r, separators=(',', ':'))}`")
    lines += ["", f"Command: `{res['command']}`", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="The revision to compare with (git rev).")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--store-requests", type=int, default=5000, help="Lifecycles per store-alone run.")
    ap.add_argument("--requests", type=int, default=6000, help="Lifecycles per proxy run.")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    load0 = [round(x, 2) for x in os.getloadavg()]
    runs: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="distrs-store-ab-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.base], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        redis = RedisServer(Path(tmp) / "redis", appendfsync="everysec")
        redis.data_dir.mkdir()
        redis.start()
        try:
            for _ in range(args.rounds):
                for name, root in (("before", base), ("after", ROOT)):
                    r = {
                        "store_alone": store_alone(root, args.store_requests),
                        "proxy": asyncio.run(through_proxy(root, redis, Path(tmp), args.requests)),
                    }
                    print(name, r, flush=True)
                    runs.append((name, r))
        finally:
            redis.stop()
    rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True)
    res = {
        "benchmark": "store_ab",
        "base": args.base if rev.stdout.strip() in ("", args.base) else f"{rev.stdout.strip()} ({args.base})",
        "rounds": args.rounds,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_average_at_start": load0,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "means": {name: _mean(runs, name) for name in ("before", "after")},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store_ab.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "store_ab.md").write_text(_markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
