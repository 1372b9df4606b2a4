"""A ``distrs-trace/1`` file (read by ``distrs.sim.trace``) as replay batches, optionally a slice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from distrs.replay.driver import ReplayBatch, ReplayRequest
from distrs.sim.trace import load, read_meta


def load_meta(trace: str | Path) -> dict[str, Any]:
    return read_meta(trace)


def load_batches(
    trace: str | Path, tasks: int | None = None, iterations: int | None = None, batch: int | None = None
) -> tuple[dict[str, Any], list[ReplayBatch]]:
    """Meta and batches; keeps the first ``tasks`` tasks, ``iterations`` per task, ``batch`` requests each."""
    tr = load(trace)
    mask = np.ones(tr.n, dtype=bool)
    if tasks is not None:
        mask &= tr.task < tasks
    if iterations is not None:
        mask &= tr.iteration < iterations
    if batch is not None:
        mask &= tr.request < batch
    tr = tr.select(mask)
    names = tr.stage_names
    groups: dict[tuple[int, int], list[ReplayRequest]] = {}
    starts: dict[tuple[int, int], float] = {}
    for i in range(tr.n):
        key = (int(tr.task[i]), int(tr.iteration[i]))
        starts[key] = float(tr.rollout_start[i])
        groups.setdefault(key, []).append(
            ReplayRequest(
                index=int(tr.request[i]),
                arrival=float(tr.arrival[i]),
                status=tr.status_names[int(tr.status[i])],
                durations={s: float(tr.s[i, j]) for j, s in enumerate(names)},
            )
        )
    out = [
        ReplayBatch(task=tr.task_names[t], iteration=it, rollout_start=starts[(t, it)], requests=tuple(rs))
        for (t, it), rs in sorted(groups.items())
    ]
    return read_meta(trace), out
