"""Progress and tables for a replay (rich), and its JSON form."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from distrs.replay.driver import BatchReport


def batch_table(
    reports: Sequence[BatchReport], stages: Sequence[str], allocated: dict[str, float] | None
) -> Table:
    t = Table(title="Replay: per-batch results (times in compressed seconds)")
    t.add_column("task")
    t.add_column("batch")
    t.add_column("size", justify="right")
    t.add_column("extra delay d (s)", justify="right")
    for s in stages:
        t.add_column(f"busy {s} (worker-s)", justify="right")
    t.add_column("statuses")
    for r in sorted(reports, key=lambda x: (x.task, x.batch_id)):
        d = "-" if r.extra_delay_s is None else f"{r.extra_delay_s:.2f}"
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(r.statuses.items()))
        t.add_row(
            r.task, r.batch_id, str(r.size), d, *[f"{r.busy_s.get(s, 0.0):.1f}" for s in stages], statuses
        )
    delays = [r.extra_delay_s for r in reports if r.extra_delay_s is not None]
    if delays:
        t.add_section()
        t.add_row(
            "all",
            f"{len(reports)} batches",
            str(sum(r.size for r in reports)),
            f"mean {statistics.mean(delays):.2f} / max {max(delays):.2f}",
            *[f"{sum(r.busy_s.get(s, 0.0) for r in reports):.1f}" for s in stages],
            "",
        )
    if allocated:
        t.add_row("allocated", "", "", "", *[f"{allocated.get(s, 0.0):.1f}" for s in stages], "")
    return t


def summary_json(
    reports: Sequence[BatchReport], stages: Sequence[str], allocated: dict[str, float] | None, speedup: float
) -> dict[str, Any]:
    delays = [r.extra_delay_s for r in reports if r.extra_delay_s is not None]
    return {
        "speedup": speedup,
        "batches": [r.__dict__ for r in reports],
        "extra_delay_s": {
            "mean": statistics.mean(delays) if delays else None,
            "max": max(delays) if delays else None,
        },
        "busy_seconds": {s: sum(r.busy_s.get(s, 0.0) for r in reports) for s in stages},
        "worker_seconds": allocated or {},
    }


def print_table(console: Console, table: Table) -> None:
    console.print(table)
