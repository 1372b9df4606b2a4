"""Reading and writing ``distrs-trace/1`` workload traces.

A trace is two files: ``NAME.csv.gz`` (one row per reward request: ``task, iteration, request,
rollout_start, arrival, status, s_<stage>...``, sorted by arrival) and ``NAME.meta.json``
(``format, mode, stages [{name, resource, timeout_s, cost}], tasks, iterations, batch, requests,
seed``). The stage list always comes from the meta file — a trace may have any number of stages.
``s_<stage>`` is the run time at that stage if the request reaches it, 0 if it never does.

In memory a trace is column arrays (numpy), because the simulator and the generator work on
whole columns; the stdlib ``csv`` module reads it (no extra dependency, ~1-2 s per 600k rows).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from distrs.core.stages import ResourceClass, StageSpec

FORMAT = "distrs-trace/1"
MODES = ("colocated", "disaggregated")


class TraceError(ValueError):
    """A trace file that does not follow ``distrs-trace/1``; the message names the problem."""


@dataclass
class Trace:
    """One trace in columns. ``task`` and ``status`` are indices into ``task_names``/``status_names``."""

    mode: str
    stages: list[StageSpec]
    task_names: list[str]
    status_names: list[str]
    task: npt.NDArray[np.int64]
    iteration: npt.NDArray[np.int64]
    request: npt.NDArray[np.int64]
    rollout_start: npt.NDArray[np.float64]
    arrival: npt.NDArray[np.float64]
    status: npt.NDArray[np.int64]
    s: npt.NDArray[np.float64]  # (n, M), pipeline order
    seed: int | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.arrival.shape[0])

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def meta(self) -> dict[str, Any]:
        iters = int(self.iteration.max()) + 1 if self.n else 0
        sizes = np.bincount(self.task * max(iters, 1) + self.iteration) if self.n else np.zeros(0)
        return {
            "format": FORMAT,
            "mode": self.mode,
            "stages": [
                {"name": s.name, "resource": str(s.resource), "timeout_s": s.timeout_s, "cost": s.cost}
                for s in self.stages
            ],
            "tasks": len(self.task_names),
            "iterations": iters,
            "batch": int(sizes[sizes > 0].max()) if sizes.size else 0,
            "requests": self.n,
            "seed": self.seed,
            **self.extra_meta,
        }

    def select(self, mask: npt.NDArray[np.bool_]) -> Trace:
        """Rows where ``mask`` holds (same stages and names)."""
        return Trace(
            self.mode,
            self.stages,
            self.task_names,
            self.status_names,
            self.task[mask],
            self.iteration[mask],
            self.request[mask],
            self.rollout_start[mask],
            self.arrival[mask],
            self.status[mask],
            self.s[mask],
            self.seed,
            dict(self.extra_meta),
        )


def paths(path: str | Path) -> tuple[Path, Path]:
    """(csv.gz, meta.json) for ``NAME``, ``NAME.csv.gz`` or ``NAME.meta.json``."""
    p = Path(path)
    name = p.name
    for suffix in (".csv.gz", ".meta.json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    base = p.with_name(name)
    return base.with_name(name + ".csv.gz"), base.with_name(name + ".meta.json")


def _stages(meta: dict[str, Any]) -> list[StageSpec]:
    raw = meta.get("stages")
    if not isinstance(raw, list) or not raw:
        raise TraceError("meta: 'stages' must be a non-empty list")
    out = []
    for i, st in enumerate(raw):
        try:
            out.append(
                StageSpec(
                    name=str(st["name"]),
                    resource=ResourceClass(st.get("resource", "cpu")),
                    timeout_s=float(st["timeout_s"]),
                    cost=float(st.get("cost", 1.0)),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"meta: stages[{i}] is invalid ({exc})") from exc
    return out


def read_meta(path: str | Path) -> dict[str, Any]:
    _, meta_path = paths(path)
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise TraceError(f"meta file {meta_path} not found") from None
    if meta.get("format") != FORMAT:
        raise TraceError(f"meta: 'format' is {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("mode") not in MODES:
        raise TraceError(f"meta: 'mode' must be one of {MODES}")
    return dict(meta)


def load(path: str | Path) -> Trace:
    """Read ``NAME.csv.gz`` + ``NAME.meta.json``."""
    csv_path, _ = paths(path)
    meta = read_meta(path)
    stages = _stages(meta)
    cols = ["task", "iteration", "request", "rollout_start", "arrival", "status"]
    scol = [f"s_{s.name}" for s in stages]
    with gzip.open(csv_path, "rt", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{csv_path}: empty file")
        missing = [c for c in cols + scol if c not in header]
        if missing:
            raise TraceError(f"{csv_path}: missing columns {missing}")
        pos = [header.index(c) for c in cols + scol]
        rows = [[r[i] for i in pos] for r in reader]
    task_names: dict[str, int] = {}
    status_names: dict[str, int] = {}
    n = len(rows)
    try:
        task = np.fromiter((task_names.setdefault(r[0], len(task_names)) for r in rows), np.int64, n)
        status = np.fromiter((status_names.setdefault(r[5], len(status_names)) for r in rows), np.int64, n)
        ints = np.array([(r[1], r[2]) for r in rows], dtype=np.int64).reshape(n, 2)
        floats = np.array([[r[3], r[4], *r[6:]] for r in rows], dtype=np.float64).reshape(n, 2 + len(stages))
    except ValueError as exc:
        raise TraceError(f"{csv_path}: bad value ({exc})") from exc
    other = {
        k: v
        for k, v in meta.items()
        if k not in {"format", "mode", "stages", "tasks", "iterations", "batch", "requests", "seed"}
    }
    return Trace(
        mode=str(meta["mode"]),
        stages=stages,
        task_names=list(task_names),
        status_names=list(status_names),
        task=task,
        iteration=ints[:, 0],
        request=ints[:, 1],
        rollout_start=floats[:, 0],
        arrival=floats[:, 1],
        status=status,
        s=floats[:, 2:],
        seed=meta.get("seed"),
        extra_meta=other,
    )


def dump(trace: Trace, path: str | Path) -> tuple[Path, Path]:
    """Write the trace (rows sorted by arrival); returns the two paths written."""
    csv_path, meta_path = paths(path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    order = np.argsort(trace.arrival, kind="stable")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "task",
            "iteration",
            "request",
            "rollout_start",
            "arrival",
            "status",
            *[f"s_{n}" for n in trace.stage_names],
        ]
    )
    tn, sn = trace.task_names, trace.status_names
    for i in order.tolist():
        w.writerow(
            [
                tn[trace.task[i]],
                int(trace.iteration[i]),
                int(trace.request[i]),
                f"{trace.rollout_start[i]:.3f}",
                f"{trace.arrival[i]:.3f}",
                sn[trace.status[i]],
                *[f"{x:.3f}" for x in trace.s[i]],
            ]
        )
    with gzip.open(csv_path, "wt", newline="", compresslevel=9) as fh:
        fh.write(buf.getvalue())
    meta_path.write_text(json.dumps(trace.meta(), indent=2) + "\n")
    return csv_path, meta_path
