"""Scaling policies behind one interface: ``plan(ctx) -> Decision``.

=================  ==========================================================================
``distrs``         Alg. 2 over all active batches + Alg. 1 with EBF and the timeout-aware rule
                   (Sec. 5.1-5.2; per request by default, ``PolicyOptions.timeout_rule``, with
                   spare workers in tails, ``spare_in_tails``). What the live planner runs.
``history``        the same without the timeout-aware rule ("History-Based", Sec. 6.3).
``zq-dedicated``   zero queuing, a separate pool per task, sized from history: each task gets
                   the peak concurrency of its whole estimated batch, held until the batch
                   completes ("ZQ-Dedicated", Sec. 6.1).
``ideal``          perfect knowledge of the active batches' requests (``ctx.oracle``), one shared
                   pool, EBF, no timeout margin needed (Sec. 6.1). Simulator only.
``static``         a fixed number of workers per stage (``options.static_replicas``).
=================  ==========================================================================

The searched policies (distrs, history, ideal) apply the same scale-down hysteresis
(``with_hysteresis``), so that frequent re-plans do not shrink the pool to a plan with no slack.

Every policy returns 0 workers for a stage no active batch will use: the pool scales to zero
between batches (the workers that are still busy finish first; that is the actuator's job).
A stage an unfinished batch may still reach keeps at least one worker (``floor_pending``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from distrs.core.priority import QueuePolicy
from distrs.scaling.collect import collect, from_oracle, profile_arrays, with_estimated_T
from distrs.scaling.context import ActiveBatch, Decision, PlanContext
from distrs.scaling.search import SearchResult, search, useful_concurrency
from distrs.scaling.simulate import busy_peaks
from distrs.scaling.workload import Workload, concat


class Policy(Protocol):
    def __call__(self, ctx: PlanContext) -> Decision: ...


def floor_pending(
    ctx: PlanContext, replicas: dict[str, int], batches: list[ActiveBatch] | None = None
) -> dict[str, int]:
    """At least one worker at every stage an unfinished batch may still send requests to.

    Alg. 1 never goes below 1 (line 9); here a stage may get 0 when no active batch can reach it,
    but a batch with requests still to come keeps one worker on each stage of its type, and a
    request queued or running at a stage keeps one on each later stage of its type. Alg. 2
    draws the rest of a running request's path from one profile request, and a draw that ends
    at the current stage would otherwise retire the last worker of the next one; the request
    would then wait a whole worker start there. Either way a request the estimate did not
    foresee is never stranded until the next decision.
    """
    out = dict(replicas)
    for b in ctx.batches if batches is None else batches:
        for name in reach(ctx, b):
            if name in out and out[name] < 1:
                out[name] = min(1, ctx.cap(name))
    return out


def reach(ctx: PlanContext, b: ActiveBatch) -> list[str]:
    """The stages ``b`` may still send requests to: every stage of its type while requests are
    still to come, else every stage after the earliest one where it has a request queued or
    running."""
    path = list(ctx.stages_of(b.reward_type))
    if b.submitted < b.size:
        return path
    here = [i for i, name in enumerate(path) if b.queued.get(name, 0) or b.running_elapsed.get(name)]
    return path[min(here) + 1 :] if here else []


def spare_in_tails(ctx: PlanContext, wl: Workload, replicas: dict[str, int]) -> dict[str, int]:
    """``options.tail_spares`` workers beyond the requests running there at each stage a batch in
    its tail may still reach (queued requests are the plan's to serve; counting them too would
    start workers for a queue that is gone before they are up).

    A batch is in its tail at stage k from T_b + D − Σ_{j≥k} T_j on: the window where Sec. 5.1's
    rule lets no request of it wait, because one that ran to its timeouts would end the batch
    late. With the per-request rule (``PolicyOptions.timeout_rule``) such a request may wait up
    to D, so the plan reserves a worker for it only if the estimate shows it coming, and the
    estimate misses some: a request the profile did not have (the batch's T then turns out
    later than estimated), or a running one that runs far longer than its draw (a timeout). On
    ``cuda-single`` those waited 4-12 s for a busy worker (d up to 12.2 s). A spare, shared by
    every batch, lets the first of them start at once; once it is taken, a new one is up only a
    re-plan and a worker start later, and such requests often come in twos (on ``cuda-single``
    two arrived 0.5 s apart and the second waited 8.8 s for a compile worker). Two spares took
    the batches past T + D on the three shared traces from 9 to 2, at about +1 % GPU time.
    """
    spares = max(ctx.options.tail_spares, 0)
    if not spares:
        return dict(replicas)
    T = dict(zip(wl.batch_keys, wl.batch_T.tolist(), strict=True))
    timeouts = {s.name: s.timeout_s for s in ctx.stages}
    out = dict(replicas)
    for b in ctx.batches:
        t_b = T.get(b.key)
        if t_b is None:
            continue
        stages = reach(ctx, b)
        for i, name in enumerate(stages):
            if name not in out or ctx.now < t_b + ctx.max_extra_delay_s - sum(
                timeouts[n] for n in stages[i:]
            ):
                continue
            out[name] = max(out[name], min(running(ctx, name) + spares, ctx.cap(name)))
    return out


def running(ctx: PlanContext, stage: str) -> int:
    """Requests running at ``stage`` now, over every active batch."""
    return sum(len(b.running_elapsed.get(stage, ())) for b in ctx.batches)


def in_flight(ctx: PlanContext, stage: str) -> int:
    """Requests running or queued at ``stage`` now, over every active batch: the workers a
    re-plan never takes away."""
    return sum(len(b.running_elapsed.get(stage, ())) + b.queued.get(stage, 0) for b in ctx.batches)


def _estimates(wl: Workload) -> dict[tuple[str, str], float]:
    return {key: float(t) for key, t in zip(wl.batch_keys, wl.batch_T, strict=True)}


def _search(
    ctx: PlanContext,
    wl: Workload,
    timeout_aware: bool,
    margin_s: float = 0.0,
    within: Mapping[str, tuple[int, int]] | None = None,
    hint: Mapping[str, int] | None = None,
) -> SearchResult:
    return search(
        wl,
        ctx.stages,
        ctx.max_extra_delay_s,
        policy=QueuePolicy.EBF,
        timeout_aware=timeout_aware,
        max_replicas=ctx.max_replicas,
        stage_max=ctx.stage_max_replicas,
        warm_start=hint or ctx.options.search_hint or ctx.options.warm_start,
        timeout_check=ctx.options.timeout_check,
        margin_s=margin_s,
        within=within,
        request_allowance_s=ctx.max_extra_delay_s if ctx.options.timeout_rule == "request" else None,
    )


def with_hysteresis(ctx: PlanContext, wl: Workload, timeout_aware: bool, res: SearchResult) -> dict[str, int]:
    """Scale down only idle capacity, and only as far as the plan keeps some slack.

    Alg. 1 returns the fewest workers that just meet the deadlines if they are available from
    now on. Re-planned every few seconds, that tight answer shrinks the pool after every
    decision, and the first estimate that turns out low must then *add* workers, which arrive a
    cold start later than the simulation assumed. Two guards, both only on a scale-down:

    * a re-plan never retires a busy worker: the pool stays at least at the number of requests
      running or queued at the stage now, so it shrinks as workers fall idle. When the last
      requests of a batch run long (the timeout-aware case of Sec. 5.1), the estimate of their
      remaining time is the least reliable part of the plan, and a worker retired on that
      estimate is not there for the next arrival;
    * a second search against deadlines ``scale_down_margin_s`` earlier bounds how far it goes:
      new = max(tight answer, min(current, answer with margin)).

    Scale-ups are never held back.
    """
    current = ctx.options.warm_start
    if not current or all(n >= current.get(k, 0) for k, n in res.replicas.items()):
        return dict(res.replicas)
    out = dict(res.replicas)
    margin = ctx.options.scale_down_margin_s or 0.0
    if margin > 0:
        # new = max(tight, min(current, safe)): bisect the safe answer only inside [tight, current]
        within = {k: (n, max(n, current.get(k, 0))) for k, n in res.replicas.items()}
        # searched down from the current allocation: usually it holds, or nearly
        safe = _search(
            ctx, wl, timeout_aware, margin, within, hint={k: hi for k, (_, hi) in within.items()}
        ).replicas
        out = {k: max(n, min(current.get(k, 0), safe[k])) for k, n in out.items()}
    for k, n in out.items():
        out[k] = max(n, min(current.get(k, 0), in_flight(ctx, k)))
    return out


def with_lookahead(ctx: PlanContext, wl: Workload, replicas: dict[str, int]) -> dict[str, int]:
    """Start new workers only when the plan needs them within ``scale_up_lookahead_s``.

    Alg. 1's N_k holds from now to the end of every active batch, but the requests that keep
    all N_k busy may come much later: a batch's first execute request follows its first
    compile by about a compile time, and a hint comes ~30 s before the first request. A worker
    started now and idle until then is paid for nothing. With the planner re-planning every
    ``interval`` and a worker taking ``start`` seconds to come up, a worker the plan needs
    after now + interval + start can still be started at the next decision; so a scale-up goes
    only to the plan's busy peak before now + lookahead (lookahead = interval + start), and the
    rest follows as the window slides.

    The same holds for a pool that is already larger (``lookahead_scale_down``): N_k is the
    most the plan needs at any time until every active batch ends, often for a batch's tail
    minutes away, where the timeout-aware rule lets no request wait; workers idle until then
    are released (never a busy one) and started again in time by a later decision. On the
    first 10 iterations of ``cuda-colocated`` this took distrs's GPU time down 1.8 % at the
    same delay.
    """
    horizon = ctx.options.scale_up_lookahead_s or 0.0
    current = ctx.options.warm_start or {}
    down = ctx.options.lookahead_scale_down
    if horizon <= 0 or wl.n == 0 or (not down and all(n <= current.get(k, 0) for k, n in replicas.items())):
        return replicas
    names = [s.name for s in ctx.stages]
    peaks = busy_peaks(wl, [replicas[n] for n in names], ctx.now + horizon, QueuePolicy.EBF)
    out = dict(replicas)
    for name, peak in zip(names, peaks, strict=True):
        have = current.get(name, 0)
        if down:
            out[name] = min(out[name], max(peak, in_flight(ctx, name)))
        elif out[name] > have:
            out[name] = max(have, min(out[name], peak))
    return out


def _searched(ctx: PlanContext, wl: Workload, timeout_aware: bool) -> Decision:
    res = _search(ctx, wl, timeout_aware)
    replicas = floor_pending(ctx, with_lookahead(ctx, wl, with_hysteresis(ctx, wl, timeout_aware, res)))
    if timeout_aware and ctx.options.timeout_rule == "request":
        replicas = spare_in_tails(ctx, wl, replicas)
    return Decision(
        replicas=replicas,
        estimated_completion=_estimates(wl),
        debug={
            "requests": wl.n,
            "simulations": res.simulations,
            "upper_bounds": res.upper_bounds,
            "satisfiable": res.satisfiable,
            "late_batches": [f"{wl.batch_keys[i][0]}/{wl.batch_keys[i][1]}" for i in res.late],
            "stage_seconds": res.stage_seconds,
            "sources": wl.debug.get("sources", {}),
            "search": dict(res.replicas),
        },
    )


def known_workload(ctx: PlanContext) -> Workload:
    """The request set the searched policies plan on: Alg. 2's estimate, or as much of the
    truth as ``options.knowledge`` grants (the simulator's gap breakdown)."""
    level = ctx.options.knowledge
    if level in ("estimate", "arrivals"):
        return collect(ctx)
    if ctx.oracle is None:
        raise ValueError(f"knowledge={level!r} needs ctx.oracle; only the simulator has it")
    wl = from_oracle(ctx, ctx.oracle)
    return with_estimated_T(ctx, wl) if level == "requests" else wl


def distrs_policy(ctx: PlanContext) -> Decision:
    return _searched(ctx, known_workload(ctx), timeout_aware=True)


def history_policy(ctx: PlanContext) -> Decision:
    return _searched(ctx, collect(ctx), timeout_aware=False)


def ideal_policy(ctx: PlanContext) -> Decision:
    if ctx.oracle is None:
        raise ValueError("the ideal policy needs ctx.oracle (perfect knowledge); only the simulator has it")
    return _searched(ctx, from_oracle(ctx, ctx.oracle), timeout_aware=False)


def batch_profile_workload(ctx: PlanContext, batches: list[ActiveBatch]) -> Workload:
    """The whole estimated batches, as if none of it had happened yet: every profile request
    at anchor + r_i with its full s_i (what a per-batch, zero-queuing plan is sized from)."""
    names = [s.name for s in ctx.stages]
    reward_type_of = {b.task: b.reward_type for b in ctx.batches}
    parts = []
    for b in batches:
        prof = profile_arrays(ctx, b, reward_type_of, learn=False)
        work = prof.s.sum(axis=1) > 0
        n = int(work.sum())
        parts.append(
            Workload(
                stage_names=names,
                arrival=b.anchor + prof.r[work],
                service=prof.s[work],
                first_stage=np.zeros(n, dtype=np.int64),
                running=np.zeros(n, dtype=bool),
                batch=np.zeros(n, dtype=np.int64),
                batch_keys=[b.key],
                batch_T=np.array([b.anchor + prof.earliest_completion()]),
                timeout_suffix=np.zeros((1, len(names))),
                now=ctx.now,
            )
        )
    return concat(parts, names, ctx.now)


def zq_dedicated_policy(ctx: PlanContext) -> Decision:
    """ZQ-Dedicated (Sec. 6.1): each task gets its own pool, sized so that its batch, as
    estimated from its history, never queues, i.e. the peak concurrency of the whole estimated
    batch at each stage. The size depends only on the task's own active batches, not on when
    the decision runs, so a task's pool is set when its batch arrives and held until the batch
    completes, whatever other tasks do. A first batch therefore stays on the default profile: its
    finished requests (the short ones, early) would shrink a pool that must never queue."""
    names = [s.name for s in ctx.stages]
    dedicated: dict[str, dict[str, int]] = {}
    tasks = sorted({b.task for b in ctx.batches})
    for task in tasks:
        mine = [b for b in ctx.batches if b.task == task]
        peak = useful_concurrency(batch_profile_workload(ctx, mine))
        dedicated[task] = floor_pending(
            ctx, {n: min(p, ctx.cap(n)) for n, p in zip(names, peak, strict=True)}, mine
        )
    replicas = {n: sum(d[n] for d in dedicated.values()) for n in names}
    return Decision(replicas=replicas, estimated_completion=_estimates(collect(ctx)), dedicated=dedicated)


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
