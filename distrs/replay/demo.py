"""``make demo`` / ``distrs demo``: the embedded service replaying a short multi-tenant slice.

The shipped trace is time-compressed by ``speedup``; so that the planner reasons in the same
compressed time, the demo's pipeline timeouts and no-history batch span are divided by it too.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from distrs.local_service import serve
from distrs.replay.driver import BatchReport
from distrs.replay.report import batch_table
from distrs.replay.run import demo_trace, replay_async
from distrs.replay.trace_input import load_meta


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
class CompressedRun:
    url: str
    reports: list[BatchReport]
    allocated: dict[str, float]
    stages: list[str]


DEFAULT_SPAN_TRACE_S = 900.0
DEFAULT_FIRST_TRACE_S = 30.0
"""First-batch fallback arrivals (trace seconds): what the planner assumes before any history."""


async def run_compressed(
    trace: Path,
    speedup: float,
    max_workers: int,
    planner_overrides: dict[str, Any],
    console: Console,
) -> CompressedRun:
    """Replay ``trace`` at ``speedup`` through an embedded service whose timeouts are compressed too."""
    meta = load_meta(trace)
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
                max_workers=max_workers,
                planner_overrides=overrides,
            ) as running:
                starting.stop()
                console.print(f"[bold]DistRS up at {running.url}[/] — replaying {trace.name} at {speedup:g}x")
                _, reports, _ = await replay_async(running.url, trace, speedup, console=console)
                allocated = dict(running.planner.allocated_s)
                starting = console.status("draining workers and stopping...")
                starting.start()
        finally:
            starting.stop()
    return CompressedRun(running.url, reports, allocated, [s["name"] for s in meta["stages"]])


async def _demo(trace: Path, speedup: float, max_workers: int, console: Console) -> int:
    run = await run_compressed(
        trace, speedup, max_workers, {"max_extra_delay_s": 1.0, "interval_s": 2.0}, console
    )
    console.print(batch_table(run.reports, run.stages, run.allocated))
    return 1 if any(r.extra_delay_s is None for r in run.reports) else 0


def demo_main(speedup: float = 20.0, max_workers: int = 64, trace: str | None = None) -> int:
    console = Console()
    return asyncio.run(_demo(Path(trace) if trace else demo_trace(), speedup, max_workers, console))
