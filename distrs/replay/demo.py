"""``make demo`` / ``distrs demo``: the embedded service replaying a short multi-tenant slice.

The shipped trace is time-compressed by ``speedup``; so that the planner reasons in the same
compressed time, the demo's pipeline timeouts and no-history batch span are divided by it too.

What the demo shows, besides the per-batch table: what d is and what bounds it (``D_TEXT``), and
how the planner learns. Every decision is recorded (``PlanLog``): where each batch's plan came
from (the no-history default, the batch's own finished requests, the task's previous batch) and
the completion T it expected when the batch was registered, which the report sets against the T
the batch really had, iteration by iteration.

Sizing: stage work is simulated by workers that sleep (the ``synthetic`` reward type), so the
demo needs the cores only for the proxy, planner and replay; what it sizes is the worker pools,
capped per stage at what the slice can keep busy at once (``stage_caps``) rather than a fixed
count, so the service never starts more workers than the slice could use.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from distrs.local_service import serve
from distrs.proxy.auth import public_task
from distrs.replay.driver import BatchReport
from distrs.replay.report import batch_table
from distrs.replay.run import demo_trace, replay_async
from distrs.replay.trace_input import load_meta
from distrs.scaling.context import Decision, PlanContext
from distrs.scaling.workload import peak_overlap
from distrs.sim.trace import Trace, load


def compressed_pipelines(meta: dict[str, object], speedup: float) -> dict[str, object]:
    stages = meta["stages"]
    assert isinstance(stages, list)
    return {
        "stages": {
            s["name"]: {"resource": s["resource"], "timeout_s": s["timeout_s"] / speedup, "cost": s["cost"]}
            for s in stages
        },
        "reward_types": {"synthetic": [s["name"] for s in stages]},
    }


@dataclass
class BatchPlan:
    """What the planner believed about one batch, over the decisions that saw it."""

    anchor: float
    first_estimate: float | None = None
    """T_b the planner expected at its first decision for the batch, relative to the anchor."""
    sources: list[str] = field(default_factory=list)
    """Where its estimate came from, in order (``default``, ``in-batch``, ``own``, ``pooled:...``)."""


class PlanLog:
    """Records every decision's view of each batch (the planner calls ``record`` from a thread)."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, str], BatchPlan] = {}
        self._lock = threading.Lock()

    def record(self, ctx: PlanContext, decision: Decision) -> None:
        sources = decision.debug.get("sources", {})
        with self._lock:
            for b in ctx.batches:
                key = (public_task(b.task), b.batch_id)  # as the trainer (the replay) names it
                plan = self.batches.setdefault(key, BatchPlan(anchor=b.anchor))
                est = decision.estimated_completion.get(b.key)
                if plan.first_estimate is None and est is not None:
                    plan.first_estimate = est - b.anchor
                src = sources.get(f"{b.task}/{b.batch_id}")
                if src and (not plan.sources or plan.sources[-1] != src):
                    plan.sources.append(src)

    def wrap(self, inner: Callable[[PlanContext], Decision]) -> Callable[[PlanContext], Decision]:
        def plan(ctx: PlanContext) -> Decision:
            decision = inner(ctx)
            self.record(ctx, decision)
            return decision

        return plan


@dataclass
class CompressedRun:
    url: str
    reports: list[BatchReport]
    allocated: dict[str, float]
    stages: list[str]


DEFAULT_SPAN_TRACE_S = 900.0
DEFAULT_FIRST_TRACE_S = 30.0
"""First-batch fallback arrivals (trace seconds): what the planner assumes before any history."""
MAX_EXTRA_DELAY_S = 1.0
"""D of the demo, in compressed seconds."""


def stage_peaks(trace: Trace) -> dict[str, int]:
    """Per stage, the most requests of the trace at that stage at once if none ever waited."""
    t = trace.arrival.copy()
    out = {}
    for k, st in enumerate(trace.stages):
        vis = trace.s[:, k] > 0
        out[st.name] = peak_overlap(t[vis], t[vis] + trace.s[vis, k])
        t = np.where(vis, t + trace.s[:, k], t)
    return out


def stage_caps(peaks: Mapping[str, int], max_workers: int, headroom: float = 1.5) -> dict[str, int]:
    """Workers per stage: the slice's peak with ``headroom`` (the replay shifts later batches of a
    task by its delays, so batches can overlap more than in the trace), at most ``max_workers``."""
    return {s: max(1, min(max_workers, math.ceil(p * headroom))) for s, p in peaks.items()}


async def run_compressed(
    trace: Path,
    speedup: float,
    max_workers: int,
    planner_overrides: dict[str, Any],
    console: Console,
    caps: Mapping[str, int] | None = None,
    plan_log: PlanLog | None = None,
) -> CompressedRun:
    """Replay ``trace`` at ``speedup`` through an embedded service whose timeouts are compressed too.

    ``caps`` bounds the workers of each stage (by its resource class: the largest cap of the CPU
    stages and of the GPU stages); ``plan_log`` records every decision."""
    meta = load_meta(trace)
    resource = {s["name"]: s["resource"] for s in meta["stages"]}
    cpu = [n for k, n in (caps or {}).items() if resource.get(k) == "cpu"]
    gpu = [n for k, n in (caps or {}).items() if resource.get(k) == "gpu"]
    with tempfile.TemporaryDirectory(prefix="distrs-demo-") as tmp:
        cfg = Path(tmp) / "pipelines.yaml"
        cfg.write_text(yaml.safe_dump(compressed_pipelines(meta, speedup)))
        # times the planner reasons in are compressed like the trace (15 s margin in trace time)
        overrides = {
            "default_batch_span_s": DEFAULT_SPAN_TRACE_S / speedup,
            "default_first_arrival_s": DEFAULT_FIRST_TRACE_S / speedup,
            "scale_down_margin_s": 15.0 / speedup,
            **planner_overrides,
        }
        starting = console.status("starting the proxy, planner and workers...")
        starting.start()
        try:
            async with serve(
                port=0,
                insecure=True,
                pipelines_file=str(cfg),
                max_workers=max(caps.values()) if caps else max_workers,
                planner_overrides=overrides,
                cpu_stage_cap=max(cpu) if cpu else None,
                gpu_stage_cap=max(gpu) if gpu else None,
            ) as running:
                if plan_log is not None:
                    running.planner.plan_fn = plan_log.wrap(running.planner.plan_fn)
                starting.stop()
                console.print(f"[bold]DistRS up at {running.url}[/] — replaying {trace.name} at {speedup:g}x")
                _, reports, _ = await replay_async(running.url, trace, speedup, console=console)
                allocated = dict(running.planner.allocated_s)
                starting = console.status("draining workers and stopping...")
                starting.start()
        finally:
            starting.stop()
    return CompressedRun(running.url, reports, allocated, [s["name"] for s in meta["stages"]])


def d_text(speedup: float) -> str:
    return (
        "d, a batch's extra delay: when its last reward came back, less its earliest possible "
        "completion T = max over its requests of (arrival + run time at every stage it reaches), "
        "what a service with a free worker for every request would achieve (DistRS Eq. 1-2). "
        f"The planner sizes each stage so that every batch ends by T + D, D = {MAX_EXTRA_DELAY_S:g} s "
        f"here ({MAX_EXTRA_DELAY_S * speedup:g} s of trace time), and keeps a request that could run "
        "to its timeout from waiting longer than D. That bound holds as far as the batch is like "
        "what the planner expected: a task's first batch has no history (the plan starts from a "
        "default guess and learns stage times from the batch's own finished requests), and a "
        "request nothing foresaw can wait for a worker to start."
    )


def _source(sources: Sequence[str]) -> str:
    names = {"default": "default guess", "in-batch": "own finished requests", "own": "previous batch"}
    seen = [names.get(s, "another task's batch" if s.startswith("pooled") else s) for s in sources]
    return " → ".join(dict.fromkeys(seen)) or "-"


def learning_table(reports: Sequence[BatchReport], log: PlanLog) -> Table:
    """Per iteration: where the plans came from, how far off the expected T was, and d."""
    t = Table(
        title="How the planner learns (compressed seconds)",
        caption="T off: the planner's T when the batch was registered, less the batch's real T.",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col, just in (("iteration", "right"), ("planned from", "left"), ("T off (mean |.|)", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    t.add_column("mean d", justify="right")
    t.add_column("max d", justify="right")
    by_iter: dict[str, list[BatchReport]] = {}
    for r in reports:
        by_iter.setdefault(r.batch_id, []).append(r)
    for it in sorted(by_iter, key=lambda b: (len(b), b)):
        rows = by_iter[it]
        plans = [log.batches.get((r.task, r.batch_id)) for r in rows]
        srcs = [s for p in plans if p is not None for s in p.sources]
        off = [
            abs(p.first_estimate - r.earliest_s)
            for r, p in zip(rows, plans, strict=True)
            if p is not None and p.first_estimate is not None and r.earliest_s is not None
        ]
        ds = [r.extra_delay_s for r in rows if r.extra_delay_s is not None]
        t.add_row(
            it.removeprefix("it"),
            _source(srcs),
            f"{statistics.mean(off):.1f}" if off else "-",
            f"{statistics.mean(ds):.2f}" if ds else "-",
            f"{max(ds):.2f}" if ds else "-",
        )
    return t


async def _demo(trace: Path, speedup: float, max_workers: int, console: Console) -> int:
    tr = load(trace)
    peaks = stage_peaks(tr)
    caps = stage_caps(peaks, max_workers)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    console.print(
        f"Replaying {trace.name}: {len(tr.task_names)} tasks × {int(tr.iteration.max()) + 1} "
        f"iterations, {tr.n} requests, {speedup:g}x faster than recorded, on {cores} cores. "
        "Stage work is simulated by workers that sleep, so the cores only run the proxy, the "
        "planner and this replay; workers per stage are capped at what the slice can keep busy "
        "at once, with room to spare: " + ", ".join(f"{s} {caps[s]} (peak {peaks[s]})" for s in caps) + "."
    )
    console.print(d_text(speedup))
    log = PlanLog()
    t0 = time.monotonic()
    run = await run_compressed(
        trace,
        speedup,
        max_workers,
        {"max_extra_delay_s": MAX_EXTRA_DELAY_S, "interval_s": 2.0},
        console,
        caps=caps,
        plan_log=log,
    )
    console.print(batch_table(run.reports, run.stages, run.allocated))
    console.print(learning_table(run.reports, log))
    console.print(f"Replay took {time.monotonic() - t0:.0f} s.")
    return 1 if any(r.extra_delay_s is None for r in run.reports) else 0


def demo_main(speedup: float = 20.0, max_workers: int = 64, trace: str | None = None) -> int:
    console = Console()
    return asyncio.run(_demo(Path(trace) if trace else demo_trace(), speedup, max_workers, console))
