"""Loading a ``distrs-trace/1`` file into replay batches (optionally a slice of it)."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

from distrs.replay.driver import ReplayBatch, ReplayRequest


def meta_path(trace: str | Path) -> Path:
    p = str(trace)
    for suffix in (".csv.gz", ".csv"):
        if p.endswith(suffix):
            return Path(p[: -len(suffix)] + ".meta.json")
    raise ValueError(f"{trace}: expected NAME.csv.gz or NAME.csv")


def load_meta(trace: str | Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(meta_path(trace).read_text())
    if meta.get("format") != "distrs-trace/1":
        raise ValueError(f"{trace}: format {meta.get('format')!r}, expected 'distrs-trace/1'")
    return meta


def load_batches(
    trace: str | Path, tasks: int | None = None, iterations: int | None = None, batch: int | None = None
) -> tuple[dict[str, Any], list[ReplayBatch]]:
    """Meta and batches; keeps the first ``tasks`` tasks, ``iterations`` per task, ``batch`` requests each."""
    meta = load_meta(trace)
    stages = [s["name"] for s in meta["stages"]]
    opener = gzip.open if str(trace).endswith(".gz") else open
    task_order: list[str] = []
    rows: dict[tuple[str, int], list[ReplayRequest]] = {}
    starts: dict[tuple[str, int], float] = {}
    with opener(trace, "rt", newline="") as f:  # type: ignore[operator]
        for row in csv.DictReader(f):
            task, it = row["task"], int(row["iteration"])
            if task not in task_order:
                if tasks is not None and len(task_order) >= tasks:
                    continue
                task_order.append(task)
            if iterations is not None and it >= iterations:
                continue
            idx = int(row["request"])
            if batch is not None and idx >= batch:
                continue
            key = (task, it)
            starts[key] = float(row["rollout_start"])
            rows.setdefault(key, []).append(
                ReplayRequest(
                    index=idx,
                    arrival=float(row["arrival"]),
                    status=row["status"],
                    durations={s: float(row.get(f"s_{s}") or 0.0) for s in stages},
                )
            )
    out = [
        ReplayBatch(task=t, iteration=i, rollout_start=starts[(t, i)], requests=tuple(rs))
        for (t, i), rs in rows.items()
    ]
    return meta, sorted(out, key=lambda b: (b.task, b.iteration))
