"""Sim-vs-live: the same time-compressed trace slice through the live service and the simulator.

Live: ``distrs up``'s embedded service (memory store, planner with the ``distrs`` policy, local
worker host) driven by ``distrs replay`` at ``SPEEDUP``; its pipeline timeouts, default batch span
and D are divided by the speedup so the planner reasons in compressed time. Sim: the cluster
simulator on the same trace with the same policy, D, history window, worker cap and first-batch fallback,
times in trace seconds, modelling two things the live service does that the trace does not show:
empty requests pass the first stage, and every stage visit costs a worker its lease and
completion round trips (measured, see ``HANDOFF_TRACE_S``). Live figures are converted back to
trace seconds (× speedup) and averaged over ``LIVE_RUNS`` runs before comparing worker-seconds
per stage and mean extra delay. Target (issue): agree within 15%.

Run: ``.venv/bin/python benchmarks/sim_vs_live.py`` (about 8 minutes: three live runs); writes
``benchmarks/results/sim_vs_live.json`` and ``.md``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from distrs.config import WorkerSettings
from distrs.replay.demo import DEFAULT_FIRST_TRACE_S, DEFAULT_SPAN_TRACE_S, run_compressed
from distrs.scaling.context import PolicyOptions
from distrs.sim.cluster import ClusterParams, replay
from distrs.sim.generator import GeneratorParams, generate
from distrs.sim.trace import dump, load

SPEEDUP = 20.0
D_TRACE_S = 20.0  # D in trace seconds (1 s of compressed time)
MAX_WORKERS = 64
HISTORY = 8
REPLAN_TRACE_S = 40.0  # the live planner re-plans every 2 compressed seconds
COLD_START_TRACE_S = 2.0  # a local worker thread starts in ~0.1 compressed s; sim start = margin
# A rollout with no code (trace status gen_failed, no stage time) is still submitted to the
# live service, where a compile worker leases it and fails it at once; the simulator is told so.
EMPTY_REQUEST_TRACE_S = 0.001
# Measured on this embedded service during a replay: a worker holds a lease 3.1-3.5 ms (median)
# longer than the run time it reports, and takes 1.7-2.0 ms (10th percentile, work waiting) from
# a completion to its next lease: ~5 ms per stage visit, 0.1 trace seconds at this speedup.
HANDOFF_TRACE_S = 0.1
SPREAD_SEEDS = range(8)
_WORKER_DEFAULTS = WorkerSettings.model_fields
LIVE_RUNS = 3
OUT = Path(__file__).resolve().parent / "results"


async def live(trace: Path) -> dict[str, Any]:
    overrides = {
        "max_extra_delay_s": D_TRACE_S / SPEEDUP,
        "interval_s": REPLAN_TRACE_S / SPEEDUP,
        "scale_down_margin_s": COLD_START_TRACE_S / SPEEDUP,
        "scale_up_lookahead_s": (REPLAN_TRACE_S + COLD_START_TRACE_S) / SPEEDUP,
    }
    t0 = time.monotonic()
    run = await run_compressed(trace, SPEEDUP, MAX_WORKERS, overrides, Console(quiet=True))
    wall = time.monotonic() - t0
    delays = [r.extra_delay_s * SPEEDUP for r in run.reports if r.extra_delay_s is not None]
    return {
        "worker_seconds": {s: run.allocated.get(s, 0.0) * SPEEDUP for s in run.stages},
        "busy_seconds": {s: sum(r.busy_s.get(s, 0.0) for r in run.reports) * SPEEDUP for s in run.stages},
        "extra_delay_s": {"mean": statistics.mean(delays), "max": max(delays)},
        "per_batch_extra_delay_s": {
            f"{r.task}/{r.batch_id}": round(r.extra_delay_s * SPEEDUP, 2)
            for r in run.reports
            if r.extra_delay_s is not None
        },
        "batches": len(run.reports),
        "wall_s": wall,
    }


def _params(seed: int = 0, cold_start_s: float = COLD_START_TRACE_S) -> ClusterParams:
    return ClusterParams(
        policy="distrs",
        max_extra_delay_s=D_TRACE_S,
        cold_start_s=cold_start_s,
        max_replicas=MAX_WORKERS,
        replan_interval_s=REPLAN_TRACE_S,
        history_window=HISTORY,
        empty_request_s=EMPTY_REQUEST_TRACE_S,
        handoff_s=HANDOFF_TRACE_S,
        # The live workers lease bundles (their defaults); the simulator shares the hand-off the same way.
        max_bundle=_WORKER_DEFAULTS["max_bundle"].default,
        bundle_target_s=_WORKER_DEFAULTS["bundle_target_s"].default * SPEEDUP,
        options=PolicyOptions(
            default_span_s=DEFAULT_SPAN_TRACE_S, default_first_s=DEFAULT_FIRST_TRACE_S, seed=seed
        ),
    )


def sim_spread(trace: Path) -> dict[str, Any]:
    """The simulator's own mean extra delay on the slice under perturbations the live run cannot
    control: Alg. 2's sampling seed (8 seeds) and the worker start time ± 0.5 trace seconds.
    With a dozen batches the mean is set by one or two late ones, so this is the yardstick for
    how closely any single run, live or simulated, can be expected to match."""
    tr = load(trace)
    means = sorted(
        replay(tr, _params(seed, COLD_START_TRACE_S + dc)).summary()["extra_delay_s"]["mean"]
        for seed in SPREAD_SEEDS
        for dc in (-0.5, 0.0, 0.5)
    )
    return {
        "runs": len(means),
        "min": means[0],
        "median": statistics.median(means),
        "max": means[-1],
        "means": [round(m, 3) for m in means],
    }


def sim(trace: Path) -> dict[str, Any]:
    r = replay(load(trace), _params())
    s = r.summary()
    return {
        "worker_seconds": s["worker_seconds"],
        "busy_seconds": s["busy_seconds"],
        "extra_delay_s": {"mean": s["extra_delay_s"]["mean"], "max": s["extra_delay_s"]["max"]},
        "per_batch_extra_delay_s": {f"{b.task}/{b.iteration}": round(b.extra_delay, 2) for b in r.batches},
        "batches": s["batches"],
    }


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The live runs' figures averaged (a live run is not repeatable: thread and event-loop timing
    differ every time, and with a dozen batches one late batch moves the mean by a second)."""
    stages = list(runs[0]["worker_seconds"])
    return {
        "worker_seconds": {s: statistics.mean(r["worker_seconds"][s] for r in runs) for s in stages},
        "busy_seconds": {s: statistics.mean(r["busy_seconds"][s] for r in runs) for s in stages},
        "extra_delay_s": {
            "mean": statistics.mean(r["extra_delay_s"]["mean"] for r in runs),
            "max": max(r["extra_delay_s"]["max"] for r in runs),
            "runs": [round(r["extra_delay_s"]["mean"], 3) for r in runs],
        },
        "runs": runs,
    }


def ratio(a: float, b: float) -> float | None:
    return None if b == 0 else a / b


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace_base = Path(tmp) / "slice"
        dump(generate(GeneratorParams(tasks=3, iterations=4, batch=64, seed=3)), trace_base)
        trace = Path(f"{trace_base}.csv.gz")
        runs = [asyncio.run(live(trace)) for _ in range(LIVE_RUNS)]
        lv = pooled(runs)
        sm = sim(trace)
        spread = sim_spread(trace)
    stages = list(sm["worker_seconds"])
    cmp = {
        "worker_seconds_live_over_sim": {
            s: ratio(lv["worker_seconds"][s], sm["worker_seconds"][s]) for s in stages
        },
        "busy_seconds_live_over_sim": {
            s: ratio(lv["busy_seconds"][s], sm["busy_seconds"][s]) for s in stages
        },
        "mean_extra_delay_live_minus_sim_s": lv["extra_delay_s"]["mean"] - sm["extra_delay_s"]["mean"],
        "mean_extra_delay_live_over_sim": ratio(lv["extra_delay_s"]["mean"], sm["extra_delay_s"]["mean"]),
        "live_mean_delay_within_sim_spread": spread["min"] <= lv["extra_delay_s"]["mean"] <= spread["max"],
    }
    result = {
        "trace": "generated: 3 tasks x 4 iterations x 64, seed 3",
        "speedup": SPEEDUP,
        "D_trace_s": D_TRACE_S,
        "live": lv,
        "sim": sm,
        "sim_spread_mean_extra_delay_s": spread,
        "comparison": cmp,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "sim_vs_live.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# Sim vs live",
        "",
        f"Trace: {result['trace']}; speedup {SPEEDUP:g}x; D = {D_TRACE_S:g} s (trace time).",
        "All figures in trace seconds.",
        "",
        "| figure | live | sim | live/sim |",
        "|---|---|---|---|",
    ]
    for s in stages:
        r = cmp["worker_seconds_live_over_sim"][s]
        lines.append(
            f"| worker-seconds {s} | {lv['worker_seconds'][s]:.0f} | {sm['worker_seconds'][s]:.0f} | "
            f"{r:.2f} |"
            if r is not None
            else f"| worker-seconds {s} | - | - | - |"
        )
    for s in stages:
        r = cmp["busy_seconds_live_over_sim"][s]
        lines.append(
            f"| busy seconds {s} | {lv['busy_seconds'][s]:.0f} | {sm['busy_seconds'][s]:.0f} | {r:.2f} |"
            if r is not None
            else f"| busy seconds {s} | - | - | - |"
        )
    dr = cmp["mean_extra_delay_live_over_sim"]
    lines.append(
        f"| mean extra delay (s) | {lv['extra_delay_s']['mean']:.2f} | {sm['extra_delay_s']['mean']:.2f} | "
        f"{'-' if dr is None else f'{dr:.2f}'} |"
    )
    lines.append(
        f"| max extra delay (s) | {lv['extra_delay_s']['max']:.2f} | {sm['extra_delay_s']['max']:.2f} | |"
    )
    lines += [
        "",
        f"Simulated mean extra delay on the same slice over {spread['runs']} runs (sampling seeds "
        f"{SPREAD_SEEDS.start}-{SPREAD_SEEDS.stop - 1}, worker start {COLD_START_TRACE_S:g} ± 0.5 s): "
        f"min {spread['min']:.2f}, median {spread['median']:.2f}, max {spread['max']:.2f} s; "
        f"the live mean is {'inside' if cmp['live_mean_delay_within_sim_spread'] else 'outside'} that range.",
        "",
        f"Live figures are the mean of {LIVE_RUNS} runs; mean extra delay per run: "
        + ", ".join(f"{m:.2f}" for m in lv["extra_delay_s"]["runs"])
        + " s. Per-batch delays of every run are in the JSON.",
    ]
    (OUT / "sim_vs_live.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
