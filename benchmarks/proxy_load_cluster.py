"""Cluster capacity run of the proxy load benchmark (``proxy_load.py --redis-mode cluster``).

Why: one Redis primary caps a deployment (docs/store.md, "Capacity"). In cluster mode every
task's keys live on the shard its hash tag maps to, so the Redis work of a lifecycle should
spread over the primaries: each of N shards doing about 1/N of it, which makes the ceiling about
N times one primary's. This run shows that spread, side by side in one run:

* one ``redis-server`` (standalone mode, the reference), then Redis Clusters of 1, 2 and 3
  primaries (``--primaries``; ``--cluster-replicas`` per primary, 0 by default, so that replicas
  do not take the cores the primaries need on a small machine; with 0 the store's WAIT for
  replicas is off), every node with AOF ``appendfsync everysec``;
* one ``distrs proxy`` (``DISTRS_REDIS_MODE=cluster``) and the throughput phase of
  ``proxy_load.py`` (register, bulk submit, lease, complete, results; one lease and one
  completion call per request) with its batches spread round-robin over ``--tasks-per-shard``
  tasks per primary, the task names chosen by the shard their hash tag lands on, so that each
  primary holds the same number of tasks;
* per run: lifecycles/s, proxy CPU per lifecycle, and Redis CPU per lifecycle of *each* primary
  (``INFO CPU`` before and after, less what the node burns idle, measured for ``IDLE_S`` just
  before), with the shard that holds the deployment-wide keys (``{distrs}``: arrival counter,
  task registry, ready index, planner events) marked.

On a machine with few cores the proxy and the load generator, not Redis, cap the total
lifecycles/s; the per-shard Redis CPU is what carries over to a machine with a core per shard.

    .venv/bin/python benchmarks/proxy_load.py --redis-mode cluster --requests 3000 --batch-size 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proxy_load import Http, Proxy, _redis_cpu_s, machine, phase_throughput
from redis.crc import key_slot

# proxy_load put the repository root on sys.path
from distrs.proxy.auth import scoped_task
from distrs.store.keys import DEFAULT_NAMESPACE, Keys
from tests.fixtures.redis_cluster import RedisCluster
from tests.fixtures.redis_server import RedisServer

# The tenant ``distrs proxy --insecure`` gives every caller.
TENANT = "default"
# How long each node's idle CPU (server cron, cluster bus) is measured before a run.
IDLE_S = 3.0


def spread_tasks(cluster: RedisCluster, per_shard: int, prefix: str) -> dict[int, list[str]]:
    """Primary port -> ``per_shard`` task names (as the trainer sends them) whose keys it holds."""
    keys = Keys(DEFAULT_NAMESPACE, cluster=True)
    primaries = cluster.primaries()
    out: dict[int, list[str]] = {p: [] for p in primaries}
    for i in range(100_000):
        name = f"{prefix}{i}"
        slot = key_slot(keys.task_tag(scoped_task(TENANT, name)).encode())
        port = next(p for p, ranges in primaries.items() if any(lo <= slot <= hi for lo, hi in ranges))
        if len(out[port]) < per_shard:
            out[port].append(name)
        if all(len(v) == per_shard for v in out.values()):
            return out
    raise AssertionError("could not spread the tasks")


def _interleave(by_port: dict[int, list[str]]) -> tuple[str, ...]:
    """Round-robin over the shards, so that consecutive batches land on different primaries."""
    lists = list(by_port.values())
    return tuple(t for group in zip(*lists, strict=True) for t in group)


async def _measure_both(
    proxy: Proxy, ports: list[int], args: argparse.Namespace, tasks: tuple[str, ...]
) -> list[dict[str, Any]]:
    """A warm-up (import paths, script caches, connection pools), then the run with one lease
    per call and the run with bundles of up to ``--bundle`` leases."""
    warm = tuple(f"wu-{t}" for t in tasks)
    await phase_throughput(
        proxy.port, 2 * args.batch_size * len(ports), args.batch_size, args.workers, 2, task_names=warm
    )
    return [
        await _measure(proxy, ports, args, tasks, args.workers, 0),
        await _measure(proxy, ports, args, tuple(f"b-{t}" for t in tasks), args.bundle_workers, args.bundle),
    ]


async def _measure(
    proxy: Proxy,
    ports: list[int],
    args: argparse.Namespace,
    tasks: tuple[str, ...],
    workers: int,
    bundle: int,
) -> dict[str, Any]:
    """One throughput run: lifecycles/s, proxy CPU and each port's Redis CPU per lifecycle."""
    # what each node burns doing nothing (cron, cluster gossip) is not the lifecycles' work: at
    # the low rates of a busy small machine it would be a large part of the per-lifecycle figure
    i0 = {p: _redis_cpu_s(p) for p in ports}
    await asyncio.sleep(IDLE_S)
    idle = {p: (_redis_cpu_s(p) - i0[p]) / IDLE_S for p in ports}
    cpu0, calls0 = proxy.cpu_s(), Http.calls
    r0 = {p: _redis_cpu_s(p) for p in ports}
    thr = await phase_throughput(
        proxy.port, args.requests, args.batch_size, workers, args.inflight, bundle=bundle, task_names=tasks
    )
    r1 = {p: _redis_cpu_s(p) for p in ports}
    n = thr["requests"]
    thr["proxy_cpu_ms_per_lifecycle"] = round(1000 * (proxy.cpu_s() - cpu0) / n, 3)
    thr["http_calls_per_lifecycle"] = round((Http.calls - calls0) / n, 3)
    raw = {p: 1000 * (r1[p] - r0[p]) / n for p in ports}
    per = {p: max(0.0, raw[p] - 1000 * idle[p] * thr["elapsed_s"] / n) for p in ports}
    total = sum(per.values())
    thr["redis_cpu_ms_per_lifecycle"] = round(total, 4)
    thr["redis_cpu_ms_per_lifecycle_with_idle"] = round(sum(raw.values()), 4)
    thr["shards"] = [
        {
            "port": p,
            "redis_cpu_ms_per_lifecycle": round(v, 4),
            "with_idle": round(raw[p], 4),
            "idle_cpu_ms_per_s": round(1000 * idle[p], 2),
            "share": round(v / total, 3) if total else 0.0,
        }
        for p, v in per.items()
    ]
    return thr


async def _standalone(args: argparse.Namespace, work: Path, tasks: tuple[str, ...]) -> list[dict[str, Any]]:
    redis = RedisServer(work / "standalone", appendfsync="everysec")
    redis.data_dir.mkdir()
    redis.start()
    proxy = Proxy(redis.url, work)
    try:
        proxy.start()
        runs = await _measure_both(proxy, [redis.port], args, tasks)
    finally:
        proxy.stop()
        redis.stop()
    for out in runs:
        out.update(mode="standalone", primaries=1, replicas=0)
        print(f"standalone, bundle {out['bundle']}: {out['lifecycles_per_s']} lifecycles/s", flush=True)
    return runs


async def _cluster(args: argparse.Namespace, work: Path, n: int) -> list[dict[str, Any]]:
    binary = shutil.which("redis-server")
    assert binary
    root = work / f"cluster-{n}"
    root.mkdir()
    cluster = RedisCluster(root, binary, primaries=n, replicas=args.cluster_replicas, appendfsync="everysec")
    proxy = Proxy(
        cluster.url,
        work,
        env={
            "DISTRS_REDIS_MODE": "cluster",
            "DISTRS_REDIS_WAIT_REPLICAS": "1" if args.cluster_replicas else "0",
        },
    )
    try:
        cluster.start()
        by_port = spread_tasks(cluster, args.tasks_per_shard, "cl")
        try:
            proxy.start()
        except RuntimeError:
            for log in work.glob(f"proxy-{proxy.port}.log"):
                print(log.read_text()[-3000:], file=sys.stderr)
            raise
        runs = await _measure_both(proxy, list(by_port), args, _interleave(by_port))
        global_slot = key_slot(Keys(DEFAULT_NAMESPACE, cluster=True).seq().encode())
        global_port = cluster.primary_of(global_slot)
    finally:
        proxy.stop()
        cluster.stop()
    for out in runs:
        out.update(mode="cluster", primaries=n, replicas=args.cluster_replicas)
        for shard in out["shards"]:
            shard["tasks"] = len(by_port[shard["port"]])
            shard["holds_global_keys"] = shard["port"] == global_port
        print(
            f"cluster of {n}, bundle {out['bundle']}: {out['lifecycles_per_s']} lifecycles/s, Redis CPU "
            f"per shard {[s['redis_cpu_ms_per_lifecycle'] for s in out['shards']]} ms/lifecycle",
            flush=True,
        )
    return runs


async def _amain(args: argparse.Namespace) -> dict[str, Any]:
    load0 = os.getloadavg()
    sizes = [int(x) for x in args.primaries.split(",")]
    with tempfile.TemporaryDirectory(prefix="distrs-bench-cluster-") as tmp:
        work = Path(tmp)
        names = tuple(f"sa{i}" for i in range(args.tasks_per_shard * max(sizes)))
        runs = await _standalone(args, work, names)
        for n in sizes:
            runs += await _cluster(args, work, n)
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    return {
        "benchmark": "proxy_load_cluster",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(version, load0),
        "appendfsync": "everysec",
        "requests": args.requests,
        "batch_size": args.batch_size,
        "batches_in_flight": args.inflight,
        "workers": args.workers,
        "bundle": args.bundle,
        "bundle_workers": args.bundle_workers,
        "tasks_per_shard": args.tasks_per_shard,
        "runs": runs,
    }


def _markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# Proxy load over Redis Cluster: the Redis work per lifecycle spread over 1-3 primaries",
        "",
        f"`{res['command']}` on {m['cpus']} CPUs ({m['platform']}, Python {m['python']}, Redis "
        f"{m['redis']}), load average {m['load_average_at_start'][0]:.1f} at start and "
        f"{m['load_average_at_end'][0]:.1f} at end: **measured on a busy machine**, the absolute "
        "figures are not final; the shares are what this run shows.",
        "",
        f"One proxy process; per store two runs: {res['workers']} workers with one lease and one "
        f"completion call per request, and {res['bundle_workers']} workers with bundles of up to "
        f"{res['bundle']} leases per call; {res['requests']} lifecycles each in batches of {res['batch_size']} "
        f"({res['batches_in_flight']} in flight) spread round-robin over {res['tasks_per_shard']} "
        "tasks per primary; AOF `appendfsync everysec`; replicas per primary: "
        f"{res['runs'][-1]['replicas']}. Redis CPU from `INFO CPU` of each primary, less its idle "
        "CPU (cron, cluster bus) measured just before the run (the JSON keeps both); * marks the "
        "primary holding the deployment-wide keys (`{distrs}`). *Ceiling × one primary*: the "
        "cluster of one primary's Redis CPU per lifecycle over the busiest primary's here (the "
        "lifecycles/s the cluster sustains with every primary on its own core, relative to one).",
        "",
        "| store | leases per call | lifecycles/s | proxy CPU ms/lifecycle | Redis CPU ms/lifecycle, "
        "total | Redis CPU ms/lifecycle per primary (share) | ceiling × one primary |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    one = {
        r["bundle"]: r["redis_cpu_ms_per_lifecycle"]
        for r in res["runs"]
        if r["mode"] == "cluster" and r["primaries"] == 1
    }
    for r in sorted(res["runs"], key=lambda r: (r["bundle"], r["mode"] != "standalone", r["primaries"])):
        name = (
            "one redis-server (standalone)"
            if r["mode"] == "standalone"
            else f"cluster, {r['primaries']} primaries"
        )
        shards = ", ".join(
            f"{s['redis_cpu_ms_per_lifecycle']:.4f}{'*' if s.get('holds_global_keys') else ''} "
            f"({100 * s['share']:.0f} %)"
            for s in sorted(r["shards"], key=lambda s: -s["redis_cpu_ms_per_lifecycle"])
        )
        busiest = max(s["redis_cpu_ms_per_lifecycle"] for s in r["shards"])
        ceiling = (
            f"{one[r['bundle']] / busiest:.2f}"
            if r["mode"] == "cluster" and r["bundle"] in one and busiest
            else "—"
        )
        calls = f"≤ {r['bundle']}" if r["bundle"] else "1"
        lines.append(
            f"| {name} | {calls} | {r['lifecycles_per_s']:.0f} | {r['proxy_cpu_ms_per_lifecycle']:.3f} "
            f"| {r['redis_cpu_ms_per_lifecycle']:.4f} | {shards} | {ceiling} |"
        )
    lines.append("")
    return "\n".join(lines)


def run_cluster(args: argparse.Namespace) -> None:
    """The cluster run: prints the table and writes ``proxy_load_cluster.{json,md}`` to ``--out``."""
    if shutil.which("redis-cli") is None:
        raise SystemExit("redis-cli is not installed (make system-deps)")
    t0 = time.perf_counter()
    res = asyncio.run(_amain(args))
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proxy_load_cluster.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "proxy_load_cluster.md").write_text(_markdown(res))
    print(_markdown(res))
