"""Before/after of the proxy hot path: this tree's proxy against an older revision's, interleaved.

The older revision is exported with ``git archive`` into a temporary folder and its proxy runs
from there (same interpreter, same installed libraries); the two proxies (memory store) take
turns, ``--rounds`` times each, on the same ``proxy_load`` throughput runs: one lease per call
(64 workers) and bundles of up to 32 (8 workers), then the same latency run at ``--rate`` req/s
(added latency p99 per call, and the load generator's own lateness apart). Reported per run:
lifecycles/s and the proxy's CPU ms per lifecycle (the steadier figure on a shared machine).

    .venv/bin/python benchmarks/proxy_ab.py --base REV     # writes benchmarks/results/proxy_ab.{json,md}

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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import proxy_load as pl  # noqa: E402


class TreeProxy(pl.Proxy):
    """``distrs proxy`` (memory store) run from the source tree ``root``."""

    def __init__(self, root: Path, work: Path) -> None:
        super().__init__(None, work)
        self.root = root

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
        env.update({"DISTRS_MAX_BULK": "4096", "PYTHONPATH": str(self.root)})
        cmd = [sys.executable, "-m", "distrs.cli", "proxy", "--port", str(self.port), "--insecure"]
        log = open(self.workdir / f"proxy-{self.port}.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [*cmd, "--log-level", "warning"], env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT
        )
        pl.wait_ready(self.proc, self.port, log.name)


async def _one(root: Path, work: Path, n: int, rate: float, seconds: float) -> dict[str, float]:
    p = TreeProxy(root, work)
    p.start()
    try:
        await pl.phase_throughput(p.port, 2000, 1000, 64, 2, "warm")
        c0 = p.cpu_s()
        single = await pl.phase_throughput(p.port, n, 1000, 64, 4, "one")
        c1 = p.cpu_s()
        bundled = await pl.phase_throughput(p.port, n, 1000, 8, 4, "bundle", bundle=32)
        c2 = p.cpu_s()
        # the proxy now holds the records of 2n + 2,000 requests, as a long-running one would
        wait0 = p.sched_s()[1]
        lat = await pl.phase_latency(p.port, rate, seconds, 64, task="lat")
        wait = p.sched_s()[1] - wait0
    finally:
        p.stop()
    return {
        "one_lease_per_s": single["lifecycles_per_s"],
        "one_lease_cpu_ms": round(1000 * (c1 - c0) / n, 3),
        "bundled_per_s": bundled["lifecycles_per_s"],
        "bundled_cpu_ms": round(1000 * (c2 - c1) / n, 3),
        "submit_p99_ms": lat["submit"]["p99_ms"],
        "complete_p99_ms": lat["complete"]["p99_ms"],
        "dispatch_p99_ms": lat["dispatch"]["p99_ms"],
        "dispatch_max_ms": lat["dispatch"]["max_ms"],
        "generator_lag_p99_ms": lat["generator_lag"]["p99_ms"],
        "generator_lag_max_ms": lat["generator_lag"]["max_ms"],
        # seconds the proxy was ready to run but another process held the core (latency run)
        "proxy_runqueue_wait_s": round(wait, 2),
    }


def _markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Proxy hot path: {res['base']} (before) against this tree (after), memory store, interleaved",
        "",
        f"Load average at the start {res['load_average_at_start']}, at the end {res['load_average_at_end']} "
        "(a shared 2-core machine: the CPU per lifecycle is the steadier figure).",
        "",
        "| run | one lease per call: lifecycles/s | CPU ms per lifecycle | bundles of 32: lifecycles/s "
        f"| CPU ms per lifecycle | at {res['rate']:.0f} req/s: submit / complete / dispatch p99 (ms) "
        "| dispatch max (ms) | generator lag p99 / max (ms) | proxy run-queue wait (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, (name, r) in enumerate(res["runs"]):
        lines.append(
            f"| {i + 1}. {name} | {r['one_lease_per_s']} | {r['one_lease_cpu_ms']} | {r['bundled_per_s']} "
            f"| {r['bundled_cpu_ms']} | {r['submit_p99_ms']} / {r['complete_p99_ms']} / {r['dispatch_p99_ms']} "
            f"| {r['dispatch_max_ms']} | {r['generator_lag_p99_ms']} / {r['generator_lag_max_ms']} "
            f"| {r.get('proxy_runqueue_wait_s', '—')} |"
        )
    m = res["means"]
    lines += [
        "",
        f"Means, before -> after: one lease per call {m['before']['one_lease_cpu_ms']} -> "
        f"{m['after']['one_lease_cpu_ms']} ms CPU per lifecycle; bundles {m['before']['bundled_cpu_ms']} -> "
        f"{m['after']['bundled_cpu_ms']} ms; dispatch p99 {m['before']['dispatch_p99_ms']} -> "
        f"{m['after']['dispatch_p99_ms']} ms, submit p99 {m['before']['submit_p99_ms']} -> "
        f"{m['after']['submit_p99_ms']} ms (generator lag p99 {m['before']['generator_lag_p99_ms']} / "
        f"{m['after']['generator_lag_p99_ms']} ms).",
        "",
        f"Command: `{res['command']}`",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="The revision to compare with (git rev).")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--rate", type=float, default=500.0, help="Submits per second in the latency run.")
    ap.add_argument("--seconds", type=float, default=6.0, help="Length of the latency run.")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    # the generator's own collector pauses would show up as proxy latency (as in proxy_load)
    from distrs.proxy.gc_policy import GcPolicy

    GcPolicy().install()
    load0 = [round(x, 2) for x in os.getloadavg()]
    runs: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="distrs-ab-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.base], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        for _ in range(args.rounds):
            for name, root in (("before", base), ("after", ROOT)):
                r = asyncio.run(_one(root, Path(tmp), args.requests, args.rate, args.seconds))
                print(name, r, flush=True)
                runs.append((name, r))
    means = {
        name: {k: round(sum(r[k] for n, r in runs if n == name) / args.rounds, 3) for k in runs[0][1]}
        for name in ("before", "after")
    }
    res = {
        "benchmark": "proxy_ab",
        "base": args.base,
        "rate": args.rate,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "load_average_at_start": load0,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "means": means,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proxy_ab.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "proxy_ab.md").write_text(_markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
