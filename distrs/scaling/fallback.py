"""Which history a batch is estimated from, including a task's first batch.

Alg. 1-2 replay "the previous batch" of the same task. A task's first batch has none, so the
profile is chosen in this order (documented in docs/scaling.md):

1. ``own``: the task's latest finished batch;
2. ``pooled``: the most recent finished batch (largest anchor) of any other task with the same
   reward type — RLVR tasks of one reward type share the arrival shape and stage times (Sec. 3);
3. ``default``: a conservative synthetic profile: ``size`` requests arriving evenly over
   [``default_first_s``, ``default_span_s``] after the anchor, each running
   ``default_stage_fraction × T_j`` at every stage of its type. It over- rather than
   under-provisions for a typical rollout, and is replaced by real history after one batch.
4. ``in-batch``: the default's arrivals, with each request's stage times (and which stages it
   visits) taken in turn from the requests of this reward type's active batches that have
   finished (``ActiveBatch.finished``), once ``learn_min_finished`` have. When every task of a
   type starts at once, as concurrent RL jobs launched together do, no task has history for a
   whole batch; the default's guess (a quarter of the timeout at every stage) is several times
   the real execute time of the CUDA trace, and the first batches cost about as much GPU time
   as the next ten. Requests that finish first are the short ones, so these samples lean short;
   the timeout-aware rule and the re-plans cover the tail, and the next batch has real history.

Profiles are turned into arrays (r, S) once and memoised by object identity (profiles are
immutable), because the planner re-reads the same few profiles at every decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from distrs.core.history import BatchProfile
from distrs.scaling.context import PolicyOptions
from distrs.scaling.workload import F64


@dataclass(frozen=True)
class ProfileArrays:
    """r_i (relative to the anchor) and s_ij (pipeline order, 0 = not visited) of one profile."""

    r: F64
    s: F64
    source: str

    def earliest_completion(self) -> float:
        """T relative to the anchor (Eq. 1-2)."""
        if self.r.size == 0:
            return 0.0
        return float((self.r + self.s.sum(axis=1)).max())


_MEMO: dict[tuple[int, tuple[str, ...]], tuple[BatchProfile, F64, F64]] = {}
_MEMO_MAX = 512


def to_arrays(profile: BatchProfile, stage_names: Sequence[str], source: str) -> ProfileArrays:
    key = (id(profile), tuple(stage_names))
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is profile:
        return ProfileArrays(hit[1], hit[2], source)
    r = np.fromiter((q.r for q in profile.requests), dtype=float, count=len(profile.requests))
    s = np.array(
        [[q.s.get(name, 0.0) for name in stage_names] for q in profile.requests], dtype=float
    ).reshape(len(profile.requests), len(stage_names))
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = (profile, r, s)
    return ProfileArrays(r, s, source)


def default_profile(
    size: int,
    stage_names: Sequence[str],
    timeouts: Sequence[float],
    type_stages: Sequence[str],
    options: PolicyOptions,
) -> ProfileArrays:
    n = max(int(size), 1)
    r = np.linspace(min(options.default_first_s, options.default_span_s), options.default_span_s, n)
    row = np.array(
        [
            t * options.default_stage_fraction if name in set(type_stages) else 0.0
            for name, t in zip(stage_names, timeouts, strict=True)
        ]
    )
    return ProfileArrays(r, np.tile(row, (n, 1)), "default")


def learned_profile(
    default: ProfileArrays,
    finished: Sequence[Mapping[str, float]],
    stage_names: Sequence[str],
    min_finished: int,
    elapsed_s: float,
    submitted: int,
) -> ProfileArrays:
    """``default`` with its stage times replaced by those of ``finished`` requests, in turn
    (request i gets finished[i mod n]: deterministic, and every sample used equally), and its
    arrivals stretched or squeezed to the batch's own pace: ``submitted`` of its requests came
    in the ``elapsed_s`` since the anchor, so the last one is expected at
    elapsed · size / submitted (never later than the default's). Without that, a batch whose
    rollout is faster than the default span would keep the default's late T_b, and a plan with
    real, short stage times would see slack it does not have."""
    n = default.r.size
    if min_finished <= 0 or len(finished) < min_finished or n == 0:
        return default
    rows = np.array([[f.get(name, 0.0) for name in stage_names] for f in finished], dtype=float)
    idx = np.arange(n) % rows.shape[0]
    r = default.r
    if submitted > 0 and elapsed_s > 0:
        last = min(elapsed_s * n / submitted, float(r.max()))
        r = np.linspace(min(float(r.min()), last), last, n)
    return ProfileArrays(r, rows[idx], "in-batch")


def choose_profile(
    task: str,
    reward_type: str,
    histories: Mapping[str, Sequence[BatchProfile]],
    reward_type_of: Mapping[str, str],
) -> tuple[BatchProfile | None, str]:
    """The profile to estimate a batch of ``task`` from, and where it came from.

    ``reward_type_of`` maps task → reward type for tasks whose profiles carry none.
    """
    own = histories.get(task) or ()
    if own:
        return own[-1], "own"
    best: BatchProfile | None = None
    for other, profiles in histories.items():
        if other == task or not profiles:
            continue
        latest = profiles[-1]
        rt = latest.reward_type or reward_type_of.get(other)
        if rt != reward_type:
            continue
        if best is None or latest.anchor > best.anchor:
            best = latest
    if best is not None:
        return best, f"pooled:{best.task}"
    return None, "default"
