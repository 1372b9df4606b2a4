"""Small builders for hand-checked scaling workloads (one row per request)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distrs.core.stages import ResourceClass, StageSpec
from distrs.scaling.workload import Workload, timeout_suffix


def stages(*spec: tuple[str, float, float]) -> list[StageSpec]:
    """(name, timeout_s, cost) per stage."""
    return [StageSpec(n, ResourceClass.GPU if c > 1 else ResourceClass.CPU, t, c) for n, t, c in spec]


ONE = stages(("run", 100.0, 1.0))
TWO = stages(("compile", 120.0, 1.0), ("execute", 60.0, 8.0))


def workload(
    st: Sequence[StageSpec],
    arrival: Sequence[float],
    service: Sequence[Sequence[float]],
    batch: Sequence[int] | None = None,
    batch_T: Sequence[float] | None = None,
    first_stage: Sequence[int] | None = None,
    running: Sequence[bool] | None = None,
    now: float = 0.0,
) -> Workload:
    n = len(arrival)
    names = [s.name for s in st]
    svc = np.asarray(service, dtype=float).reshape(n, len(st))
    arr = np.asarray(arrival, dtype=float)
    b = np.zeros(n, dtype=np.int64) if batch is None else np.asarray(batch, dtype=np.int64)
    nb = int(b.max()) + 1 if n else 1
    if batch_T is None:
        t = arr + svc.sum(axis=1)
        bt = np.full(nb, -np.inf)
        np.maximum.at(bt, b, t)
    else:
        bt = np.asarray(batch_T, dtype=float)
    suffix = timeout_suffix(names, [s.timeout_s for s in st], names)
    return Workload(
        stage_names=names,
        arrival=arr,
        service=svc,
        first_stage=np.zeros(n, dtype=np.int64)
        if first_stage is None
        else np.asarray(first_stage, dtype=np.int64),
        running=np.zeros(n, dtype=bool) if running is None else np.asarray(running, dtype=bool),
        batch=b,
        batch_keys=[("t", str(i)) for i in range(nb)],
        batch_T=bt,
        timeout_suffix=np.tile(suffix, (nb, 1)),
        now=now,
    )
