"""Progress and tables for a replay (rich), and its JSON form."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from distrs.replay.driver import BatchReport

# Short status names so the table fits an 80-column terminal; the caption spells them out.
STATUS_ABBREV = {
    "ok": "ok",
    "wrong_answer": "WA",
    "compile_error": "CE",
    "runtime_error": "RE",
    "timeout": "TLE",
    "invalid": "INV",
    "internal_error": "ERR",
}


def status_counts(statuses: dict[str, int]) -> str:
    """``{"ok": 10, "compile_error": 3}`` as ``ok=10 CE=3`` (ok first, then by name; no space inside
    a pair, so a narrow column wraps between pairs, never inside one)."""
    keys = sorted(statuses, key=lambda k: (k != "ok", k))
    return " ".join(f"{STATUS_ABBREV.get(k, k)}={statuses[k]}" for k in keys)


def batch_table(
    reports: Sequence[BatchReport], stages: Sequence[str], allocated: dict[str, float] | None
) -> Table:
    legend = ", ".join(f"{v} {k}" for k, v in STATUS_ABBREV.items() if v != k)
    t = Table(
        title="Per-batch results (compressed seconds)",
        caption=f"d: extra delay over the earliest completion; stage columns: busy worker-seconds. {legend}",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    t.add_column("task", overflow="fold")
    t.add_column("batch", overflow="fold")
    t.add_column("size", justify="right")
    t.add_column("d (s)", justify="right", no_wrap=True)
    for s in stages:
        t.add_column(s, justify="right", no_wrap=True)
    t.add_column("statuses", min_width=14)  # wraps between "NAME COUNT" pairs, never cuts
    for r in sorted(reports, key=lambda x: (x.task, x.batch_id)):
        d = "-" if r.extra_delay_s is None else f"{r.extra_delay_s:.2f}"
        t.add_row(
            r.task,
            r.batch_id,
            str(r.size),
            d,
            *[f"{r.busy_s.get(s, 0.0):.0f}" for s in stages],
            status_counts(r.statuses),
        )
    delays = [r.extra_delay_s for r in reports if r.extra_delay_s is not None]
    if delays:
        t.add_section()
        t.add_row(
            "all",
            f"{len(reports)} batches",
            str(sum(r.size for r in reports)),
            f"{statistics.mean(delays):.2f} avg",
            *[f"{sum(r.busy_s.get(s, 0.0) for r in reports):.0f}" for s in stages],
            f"max d {max(delays):.2f} s",
        )
    if allocated:
        t.add_row("allocated", "", "", "", *[f"{allocated.get(s, 0.0):.0f}" for s in stages], "")
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
