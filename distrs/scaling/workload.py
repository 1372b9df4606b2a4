"""The estimated request set a simulation runs on (the ``Reqs`` list of Alg. 2), as arrays.

One row per request still to be served: when it enters its first simulated stage, the remaining
run time at each stage (pipeline order, 0 = skipped), whether it is already running there, and
its batch. Per batch: the estimated earliest completion T_b (Eq. 1-2), which is both the EBF
priority (Sec. 5.2) and the deadline base, and Σ_{j≥k} T_j over the stages of the batch's reward
type (the LT term of the timeout-aware rule, Sec. 5.1).

Arrays instead of objects because SIMULATE runs O(M log N) times per decision over ~10^4 rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from distrs.scaling.context import BatchKey

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B1 = npt.NDArray[np.bool_]


@dataclass
class Workload:
    """Requests to simulate. ``n`` rows, ``M`` stages, ``nb`` batches."""

    stage_names: list[str]
    arrival: F64
    service: F64  # (n, M)
    first_stage: I64
    running: B1
    batch: I64
    batch_keys: list[BatchKey]
    batch_T: F64  # (nb,) estimated earliest completion, absolute
    timeout_suffix: F64  # (nb, M) Σ_{j≥k} T_j over the batch type's stages
    now: float = 0.0
    debug: dict[str, object] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.arrival.shape[0])

    @property
    def num_stages(self) -> int:
        return len(self.stage_names)

    def zero_queue_finish(self) -> F64:
        """Per-request completion if nothing ever waits: arrival + Σ remaining s (Eq. 1)."""
        return self.arrival + self.service.sum(axis=1)

    def batch_zero_queue_finish(self) -> F64:
        """Per-batch max of ``zero_queue_finish`` (−inf for a batch with no rows left)."""
        out = np.full(len(self.batch_keys), -np.inf)
        if self.n:
            np.maximum.at(out, self.batch, self.zero_queue_finish())
        return out


def peak_overlap(begin: F64, end: F64) -> int:
    """The most intervals [begin_i, end_i) open at once (at equal times, ends first).

    Two sorts instead of a sweep over twice the events with two keys: the count peaks as the
    i-th opening (in time order) opens, at i + 1 minus the ends up to then."""
    if begin.size == 0:
        return 0
    b = np.sort(begin)
    closed = np.searchsorted(np.sort(end), b, side="right")
    return int((np.arange(1, b.size + 1) - closed).max())


def empty(stage_names: Sequence[str], now: float = 0.0) -> Workload:
    m = len(stage_names)
    return Workload(
        stage_names=list(stage_names),
        arrival=np.zeros(0),
        service=np.zeros((0, m)),
        first_stage=np.zeros(0, dtype=np.int64),
        running=np.zeros(0, dtype=bool),
        batch=np.zeros(0, dtype=np.int64),
        batch_keys=[],
        batch_T=np.zeros(0),
        timeout_suffix=np.zeros((0, m)),
        now=now,
    )


def concat(parts: Sequence[Workload], stage_names: Sequence[str], now: float) -> Workload:
    """Join per-batch workloads into one multi-tenant workload (Alg. 2 over every active batch)."""
    parts = [p for p in parts if p.batch_keys]
    if not parts:
        return empty(stage_names, now)
    offsets = np.cumsum([0] + [len(p.batch_keys) for p in parts[:-1]])
    return Workload(
        stage_names=list(stage_names),
        arrival=np.concatenate([p.arrival for p in parts]),
        service=np.concatenate([p.service for p in parts], axis=0),
        first_stage=np.concatenate([p.first_stage for p in parts]),
        running=np.concatenate([p.running for p in parts]),
        batch=np.concatenate([p.batch + off for p, off in zip(parts, offsets, strict=True)]),
        batch_keys=[k for p in parts for k in p.batch_keys],
        batch_T=np.concatenate([p.batch_T for p in parts]),
        timeout_suffix=np.concatenate([p.timeout_suffix for p in parts], axis=0),
        now=now,
    )


def timeout_suffix(stage_names: Sequence[str], timeouts: Sequence[float], type_stages: Sequence[str]) -> F64:
    """Σ_{j≥k} T_j restricted to the stages of one reward type, for every pipeline index k."""
    member = np.array([name in set(type_stages) for name in stage_names], dtype=bool)
    t = np.where(member, np.asarray(timeouts, dtype=float), 0.0)
    return np.cumsum(t[::-1])[::-1].copy()
