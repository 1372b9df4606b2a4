"""Scaling policies behind one interface: ``plan(ctx) -> Decision``.

=================  ==========================================================================
``distrs``         Alg. 2 over all active batches + Alg. 1 with EBF and the timeout-aware rule
                   (Sec. 5.1-5.2). What the live planner runs.
``history``        the same without the timeout-aware rule ("History-Based", Sec. 6.3).
``zq-dedicated``   zero queuing, a separate pool per task, sized from history: each task gets
                   the peak concurrency of its own estimated requests ("ZQ-Dedicated", Sec. 6.1).
``ideal``          perfect knowledge of the active batches' requests (``ctx.oracle``), one shared
                   pool, EBF, no timeout margin needed (Sec. 6.1). Simulator only.
``static``         a fixed number of workers per stage (``options.static_replicas``).
=================  ==========================================================================

Every policy returns 0 workers for a stage no active batch will use: the pool scales to zero
between batches (the workers that are still busy finish first; that is the actuator's job).
A stage an unfinished batch may still reach keeps at least one worker (``floor_pending``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from distrs.core.priority import QueuePolicy
from distrs.scaling.collect import collect, from_oracle
from distrs.scaling.context import ActiveBatch, Decision, PlanContext
from distrs.scaling.search import search, useful_concurrency
from distrs.scaling.workload import Workload


class Policy(Protocol):
    def __call__(self, ctx: PlanContext) -> Decision: ...


def floor_pending(
    ctx: PlanContext, replicas: dict[str, int], batches: list[ActiveBatch] | None = None
) -> dict[str, int]:
    """At least one worker at every stage an unfinished batch may still send requests to.

    Alg. 1 never goes below 1 (line 9); here a stage may get 0 when no active batch can reach it,
    but a batch with requests still to come keeps one worker on each stage of its type, so a
    request the estimate did not foresee is never stranded until the next decision.
    """
    out = dict(replicas)
    for b in ctx.batches if batches is None else batches:
        if b.submitted < b.size:
            for name in ctx.stages_of(b.reward_type):
                if name in out and out[name] < 1:
                    out[name] = min(1, ctx.max_replicas)
    return out


def _estimates(wl: Workload) -> dict[tuple[str, str], float]:
    return {key: float(t) for key, t in zip(wl.batch_keys, wl.batch_T, strict=True)}


def _searched(ctx: PlanContext, wl: Workload, timeout_aware: bool) -> Decision:
    res = search(
        wl,
        ctx.stages,
        ctx.max_extra_delay_s,
        policy=QueuePolicy.EBF,
        timeout_aware=timeout_aware,
        max_replicas=ctx.max_replicas,
        warm_start=ctx.options.warm_start,
        wait_floor=ctx.options.timeout_wait_floor,
    )
    return Decision(
        replicas=floor_pending(ctx, res.replicas),
        estimated_completion=_estimates(wl),
        debug={
            "requests": wl.n,
            "simulations": res.simulations,
            "upper_bounds": res.upper_bounds,
            "satisfiable": res.satisfiable,
            "late_batches": [f"{wl.batch_keys[i][0]}/{wl.batch_keys[i][1]}" for i in res.late],
            "stage_seconds": res.stage_seconds,
            "sources": wl.debug.get("sources", {}),
        },
    )


def distrs_policy(ctx: PlanContext) -> Decision:
    return _searched(ctx, collect(ctx), timeout_aware=True)


def history_policy(ctx: PlanContext) -> Decision:
    return _searched(ctx, collect(ctx), timeout_aware=False)


def ideal_policy(ctx: PlanContext) -> Decision:
    if ctx.oracle is None:
        raise ValueError("the ideal policy needs ctx.oracle (perfect knowledge); only the simulator has it")
    return _searched(ctx, from_oracle(ctx, ctx.oracle), timeout_aware=False)


def zq_dedicated_policy(ctx: PlanContext) -> Decision:
    names = [s.name for s in ctx.stages]
    dedicated: dict[str, dict[str, int]] = {}
    estimates: dict[tuple[str, str], float] = {}
    tasks = sorted({b.task for b in ctx.batches})
    for task in tasks:
        wl = collect(ctx, [b for b in ctx.batches if b.task == task])
        estimates.update(_estimates(wl))
        peak = useful_concurrency(wl)
        mine = [b for b in ctx.batches if b.task == task]
        dedicated[task] = floor_pending(
            ctx, {n: min(p, ctx.max_replicas) for n, p in zip(names, peak, strict=True)}, mine
        )
    replicas = {n: sum(d[n] for d in dedicated.values()) for n in names}
    return Decision(replicas=replicas, estimated_completion=estimates, dedicated=dedicated)


def static_policy(ctx: PlanContext) -> Decision:
    opt = ctx.options.static_replicas
    if isinstance(opt, Mapping):
        replicas = {s.name: int(opt.get(s.name, 0)) for s in ctx.stages}
    else:
        replicas = {s.name: int(opt) for s in ctx.stages}
    wl = collect(ctx) if ctx.batches else None
    return Decision(replicas=replicas, estimated_completion=_estimates(wl) if wl else {})


POLICIES: dict[str, Callable[[PlanContext], Decision]] = {
    "distrs": distrs_policy,
    "history": history_policy,
    "zq-dedicated": zq_dedicated_policy,
    "ideal": ideal_policy,
    "static": static_policy,
}


def plan(ctx: PlanContext) -> Decision:
    """Run the policy named by ``ctx.policy``; ``debug['elapsed_s']`` is its wall time."""
    try:
        policy = POLICIES[ctx.policy]
    except KeyError:
        raise ValueError(f"unknown scaling policy {ctx.policy!r}; choose one of {sorted(POLICIES)}") from None
    t0 = time.perf_counter()
    decision = policy(ctx)
    decision.debug["elapsed_s"] = time.perf_counter() - t0
    decision.debug["policy"] = ctx.policy
    return decision
