"""Alg. 1 of DistRS: simulation-based sequential binary search for N_j per stage.

Differences from the paper's pseudocode, and why:

* **Upper bound.** Alg. 1 starts every N_j at B (line 6) and searches [1, B] (line 9). Here the
  upper end is the *largest useful concurrency* of the stage: the most requests that could be at
  that stage at once if nothing ever waited anywhere (a sweep over zero-queuing intervals). More
  workers than that can never be busy, so the answer is the same whenever the constraint can be
  met, and it costs fewer probes. A stage no request will visit gets 0 workers.
* **Late requests.** A request that cannot meet T_b + D even with zero queuing (it is already
  running long, or an estimated request ends after the batch's estimated T) may finish by its
  own zero-queuing finish + D (``request_floors``); the rest of its batch keeps T_b + D. The
  search then returns the fewest workers that add no more than D to what is unavoidable,
  instead of concluding "unsatisfiable" and allocating everything. Batches with such requests
  are reported in ``SearchResult.late``.
* **Unsatisfiable case.** With those deadlines the all-upper-bound allocation always
  satisfies the check, so the constraint is unsatisfiable only when ``max_replicas`` caps a stage
  below its useful concurrency and the capped allocation fails. Then the search returns the
  capped upper bounds (never more than ``max_replicas``, never more than useful) and
  ``satisfiable=False``.
* **Lower end.** The bisection starts at the larger of ⌈work / window⌉ and the timeout rule's
  bound (``Simulator.no_wait_bound``): requests that must not wait need a worker free when they
  arrive, and so does everything that arrived before them and still runs. Counts below either
  fail for certain. The rule's bound is often the answer itself (a stage whose batches are all
  in their tails), so it is probed first: one simulation instead of a dozen.
* **Warm start.** With the previous decision as a hint, the search gallops from it
  (``gallop``): the hint, then hint−1, −2, −4, ... while they pass (or +1, +2, +4, ... while
  they fail), then a bisection of what is left. When the workload has not changed much that
  settles the stage in two or three simulations. The result is the same minimum the bisection
  would find when the simulation is monotone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from distrs.core.priority import QueuePolicy
from distrs.core.stages import StageSpec
from distrs.scaling.simulate import Simulator
from distrs.scaling.workload import F64, Workload, peak_overlap


@dataclass
class SearchResult:
    replicas: dict[str, int]
    satisfiable: bool
    upper_bounds: dict[str, int]
    simulations: int
    stage_seconds: dict[str, float] = field(default_factory=dict)
    late: list[int] = field(default_factory=list)  # batch indices whose deadline was relaxed
    deadlines: F64 = field(default_factory=lambda: np.zeros(0))


def deadlines(wl: Workload, max_extra_delay_s: float, margin_s: float = 0.0) -> tuple[F64, list[int]]:
    """T_b + D − margin per batch, and the batches some request of which cannot meet T_b + D
    even with zero queuing (their requests get ``request_floors`` instead)."""
    zq = wl.batch_zero_queue_finish()
    late = [int(i) for i in np.flatnonzero(zq > wl.batch_T + max_extra_delay_s + 1e-9)]
    return wl.batch_T + max_extra_delay_s - margin_s, late


def request_floors(wl: Workload, max_extra_delay_s: float, margin_s: float = 0.0) -> F64:
    """Per request, the latest finish allowed whatever T_b says: its zero-queuing finish plus
    D − margin (never below the zero-queuing finish itself).

    A request estimated to finish after T_b + D even if it never waits (already running long,
    or a profile request later than the batch's estimated T) may then still not wait more than
    D; the rest of its batch keeps T_b + D. Without this, one such request would make every
    allocation fail; with a batch-wide relaxation instead (deadline = the batch's zero-queuing
    finish + D), one late profile request would let the whole batch drift to it.
    """
    return wl.zero_queue_finish() + max(max_extra_delay_s - margin_s, 0.0)


def useful_concurrency(wl: Workload) -> list[int]:
    """Per stage: the peak number of requests at that stage when no request ever waits."""
    m = wl.num_stages
    out: list[int] = []
    t = wl.arrival.copy()
    for k in range(m):
        vis = (wl.service[:, k] > 0) & (wl.first_stage <= k)
        if not vis.any():
            out.append(0)
            continue
        begin = t[vis]
        end = begin + wl.service[vis, k]
        out.append(peak_overlap(begin, end))
        t[vis] = end
    return out


def work_lower_bounds(wl: Workload, deadlines_: F64) -> list[int]:
    """Per stage: ⌈work / window⌉, the fewest workers that could finish the stage's work at all.

    Every request must run its s_k between the earliest arrival and the latest deadline, so
    fewer workers than this fail for certain; the bisection starts above it (fewer probes).
    """
    out: list[int] = []
    if wl.n == 0:
        return [0] * wl.num_stages
    window = float(np.max(deadlines_)) - float(np.min(wl.arrival))
    for k in range(wl.num_stages):
        work = float(wl.service[:, k].sum())
        out.append(int(np.floor(work / window)) if window > 0 else 0)
    return out


def gallop(sat: Callable[[int], bool], hint: int, lo: int, hi: int, steps: int = 32) -> tuple[int, int]:
    """Narrow [lo, hi] (``hi`` satisfies) around ``hint`` with steps doubling away from it:
    hint, then hint−1, −2, −4, ... while they pass, or hint+1, +2, +4, ... while they fail, at
    most ``steps`` of them (the bisection takes what is left). Between decisions a few seconds
    apart the answer moves little, so this usually settles a stage in two or three probes where
    a bisection of the whole range takes ten; an answer d away costs about 2·log2(d) probes.
    Replaying 6 iterations of ``cuda-disaggregated``, the planner's CPU time was 11.8 s this way,
    12.9 s with at most 4 steps and 15.3 s probing the hint alone before bisecting."""
    if hint < hi and not sat(hint):
        lo, step = hint + 1, 1
        while lo < hi and step < 1 << steps:
            c = hint + step
            if c >= hi:
                break
            if sat(c):
                return lo, c
            lo, step = c + 1, step * 2
        return lo, hi
    hi, step = hint, 1
    while lo < hi and step < 1 << steps:
        c = hint - step
        if c < lo:
            break
        if not sat(c):
            return c + 1, hi
        hi, step = c, step * 2
    return lo, hi


def search(
    wl: Workload,
    stages: Sequence[StageSpec],
    max_extra_delay_s: float,
    *,
    policy: QueuePolicy = QueuePolicy.EBF,
    timeout_aware: bool = True,
    max_replicas: int = 1000,
    warm_start: Mapping[str, int] | None = None,
    timeout_check: str = "enqueue",
    margin_s: float = 0.0,
    within: Mapping[str, tuple[int, int]] | None = None,
    stage_max: Mapping[str, int] | None = None,
    request_allowance_s: float | None = None,
) -> SearchResult:
    """Fewest workers per stage, most expensive stage first (Alg. 1 lines 7-17).

    ``margin_s`` > 0 searches against deadlines that much earlier (see ``deadlines``); the
    policies use it to decide how far a scale-down may go (``policies.with_hysteresis``).
    ``within`` limits a stage's bisection to [lo, hi]: the answer is then clipped to that range
    (hi when nothing lower passes), at a fraction of the probes. ``stage_max`` caps some stages
    below ``max_replicas`` (a stage whose workers are bounded, e.g. by the cores of one machine).
    """
    names = [s.name for s in stages]
    assert names == wl.stage_names, "workload and stages must list the same stages in order"
    dl, late = deadlines(wl, max_extra_delay_s, margin_s)
    floors = request_floors(wl, max_extra_delay_s, margin_s)
    sim = Simulator(wl, dl, policy, timeout_aware, timeout_check, floors, request_allowance_s)
    raw = useful_concurrency(wl)
    caps = [min(max_replicas, (stage_max or {}).get(n, max_replicas)) for n in names]
    ub = [min(u, c) for u, c in zip(raw, caps, strict=True)]
    capped = any(u > c for u, c in zip(raw, caps, strict=True))
    num = list(ub)
    result = SearchResult(
        replicas=dict(zip(names, num, strict=True)),
        satisfiable=True,
        upper_bounds=dict(zip(names, ub, strict=True)),
        simulations=0,
        late=late,
        deadlines=dl,
    )
    if wl.n == 0:
        return result
    if capped and not sim.run(num).satisfied:
        result.satisfiable = False
        result.simulations = sim.runs
        return result
    lower = work_lower_bounds(wl, np.maximum(dl[wl.batch], floors) if wl.n else dl)
    # Line 7: stages by cost C_j, descending (stable: pipeline order breaks ties).
    order = sorted(range(len(stages)), key=lambda j: -stages[j].cost)
    for k in order:
        t0 = time.perf_counter()
        lo, hi = (max(1, min(lower[k], num[k])) if num[k] > 0 else 0), num[k]
        if within is not None and names[k] in within:
            w_lo, w_hi = within[names[k]]
            hi = min(hi, w_hi)
            lo = min(max(lo, w_lo), hi)

        def sat(n: int, k: int = k) -> bool:
            num[k] = n
            return sim.run(num).satisfied

        # Fewer workers than the timeout rule's bound fail for certain; the bound is often the
        # answer itself, which one probe then settles (unless a hint says where to look).
        bound = min(sim.no_wait_bound(k, num), hi)
        hint = (warm_start or {}).get(names[k])
        if hint is not None and lo < hi:
            lo = min(max(lo, bound), hi)
            lo, hi = gallop(sat, min(max(hint, lo), hi), lo, hi)
        elif bound > lo:
            if sat(bound):
                hi = bound
            lo = min(bound + 1, hi)
        # Lines 10-16: bisection; `hi` is always known to satisfy.
        while lo < hi:
            mid = (lo + hi) // 2
            if sat(mid):
                hi = mid
            else:
                lo = mid + 1
        num[k] = lo  # line 17
        result.stage_seconds[names[k]] = time.perf_counter() - t0
    result.replicas = dict(zip(names, num, strict=True))
    result.simulations = sim.runs
    return result
