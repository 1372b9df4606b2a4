"""Alg. 2 of DistRS: estimate the requests every active batch still has to serve.

For each active batch of every task (multi-tenant, Sec. 5.2), from the profile chosen by
``fallback.choose_profile``:

* **Future** (lines 8-10): profile requests with AT + r_i > now keep their arrival AT + r_i and
  run times s_i. AT is the batch's anchor (rollout-start hint when given). The count is matched
  to what is really left, ``size − submitted``: a batch ahead of its profile keeps only the last
  of them; a batch behind it (fewer arrived than the profile predicts by now) also gets the
  missing ones, taken from the profile's latest past requests and arriving from now on with the
  same spacing — without this a slow rollout would be planned as finished and get 0 workers.
* **Queuing_k** (lines 13-15): one request per queued one, arriving now, with s_{i'k..M} of a
  profile request i' drawn uniformly among those that reach stage k.
* **Running_k** (lines 17-19): one per running request with elapsed e, drawn among profile
  requests with s_{i'k} > e, remaining s_{i'k} − e, then s_{i'(k+1)..M}. When no profile request
  ran that long, it is assumed to run to the stage timeout (remaining T_k − e, at least 1 s) and
  then to go on like the profile's longest requests at stage k (a draw among the top
  ``LONGEST_SHARE`` of them by s_{i'k}, for s_{i'(k+1)..M}). In the CUDA trace almost every
  compile that ends between 90 s and its 120 s timeout goes on to execute; planning such a
  request as ending at stage k let a scale-down retire the last GPU it was about to need.

Requests that reach no stage (e.g. generation failed) need no worker and are left out of the
workload; they still count in T_b. The batch's T_b is Eq. 1-2, shifted to the anchor, over the
earliest of the task's last few profiles (``estimated_T``; the paper uses the previous batch's,
whose T is an outlier-prone maximum). Sampling uses a generator seeded from (options.seed, task, batch, now), so a decision is
reproducible.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from distrs.scaling.context import ActiveBatch, BatchKey, OracleBatch, PlanContext
from distrs.scaling.fallback import (
    ProfileArrays,
    choose_profile,
    default_profile,
    learned_profile,
    to_arrays,
)
from distrs.scaling.workload import F64, I64, Workload, concat, timeout_suffix

LONGEST_SHARE = 0.05
"""Running_k fallback: the share of a stage's longest profile requests whose later stages a
request that already ran longer than all of them is assumed to follow."""


def _rng(seed: int, batch: ActiveBatch, now: float) -> np.random.Generator:
    tag = f"{seed}|{batch.task}|{batch.batch_id}|{round(now * 1000)}".encode()
    return np.random.default_rng(zlib.crc32(tag))


def _resize(p: ProfileArrays, size: int) -> ProfileArrays:
    """Stretch or thin a profile to ``size`` requests, keeping its r-quantiles."""
    n = p.r.size
    if n == size or n == 0 or size <= 0:
        return p
    order = np.argsort(p.r, kind="stable")
    idx = order[(np.arange(size) * n) // size]
    return ProfileArrays(p.r[idx], p.s[idx], p.source)


def profile_arrays(
    ctx: PlanContext, batch: ActiveBatch, reward_type_of: Mapping[str, str], learn: bool = True
) -> ProfileArrays:
    """The profile ``batch`` is estimated from (``fallback.py``); ``learn=False`` keeps a first
    batch on the default instead of its finished requests (a plan fixed when the batch arrives)."""
    names = [s.name for s in ctx.stages]
    profile, source = choose_profile(batch.task, batch.reward_type, ctx.histories, reward_type_of)
    if profile is None or not profile.requests:
        default = default_profile(
            batch.size,
            names,
            [s.timeout_s for s in ctx.stages],
            ctx.stages_of(batch.reward_type),
            ctx.options,
        )
        # No task of this type has a finished batch: every active one of the type is a first
        # batch, and their finished requests are all there is to learn from.
        if not learn:
            return default
        finished = [f for b in ctx.batches if b.reward_type == batch.reward_type for f in b.finished]
        return learned_profile(
            default, finished, names, ctx.options.learn_min_finished, ctx.now - batch.anchor, batch.submitted
        )
    return _resize(to_arrays(profile, names, source), batch.size)


def estimated_T(ctx: PlanContext, batch: ActiveBatch, prof: ProfileArrays) -> float:
    """T_b relative to the anchor: the earliest T (Eq. 1-2) of the task's last
    ``options.t_estimate_batches`` finished batches, or the chosen profile's T.

    T is the maximum over a batch's requests of r_i + Σ_j s_ij, set by one or two late,
    long-running requests, so it jumps by tens of seconds between adjacent batches while the
    arrival curve and the stage times barely move. A plan aimed at an overestimate of T lets the
    tail queue and finishes late against the real T; aimed at the earliest recent T it keeps the
    tail moving, and a request that really runs later is covered by its own deadline
    (``search.request_floors``).
    """
    k = max(ctx.options.t_estimate_batches, 1)
    own = list(ctx.histories.get(batch.task) or ())[-k:]
    if prof.source != "own" or not own:
        return prof.earliest_completion()
    if len(own) < k:  # a young task: the latest batches of other tasks of its type count too
        others = [
            ps[-1]
            for task, ps in ctx.histories.items()
            if task != batch.task and ps and (ps[-1].reward_type or batch.reward_type) == batch.reward_type
        ]
        own += sorted(others, key=lambda p: p.anchor, reverse=True)[: k - len(own)]
    names = [s.name for s in ctx.stages]
    return min(to_arrays(p, names, "own").earliest_completion() for p in own)


def future_at_true_times(batch: ActiveBatch, prof: ProfileArrays, arrivals: F64) -> tuple[I64, F64]:
    """Future requests at their true ``arrivals`` (absolute), each with the stage times of the
    profile request at the same position in its batch (the j-th arrival of the batch takes the
    profile's request of rank j · n / size by r). Only the gap breakdown uses this: it
    separates a misestimated arrival curve from misestimated stage times."""
    when = np.sort(np.asarray(arrivals, dtype=float))
    n = prof.r.size
    if n == 0 or when.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rank = batch.submitted + np.arange(when.size)
    by_r = np.argsort(prof.r, kind="stable")
    return by_r[np.minimum(rank * n // max(batch.size, 1), n - 1)], when


def collect_batch(
    ctx: PlanContext, batch: ActiveBatch, prof: ProfileArrays, true_future: F64 | None = None
) -> Workload:
    """Alg. 2 for one batch (``true_future``: see ``future_at_true_times``)."""
    names = [s.name for s in ctx.stages]
    index = {n: i for i, n in enumerate(names)}
    m = len(names)
    now = ctx.now
    rng = _rng(ctx.options.seed, batch, now)
    arrivals: list[np.ndarray] = []
    services: list[np.ndarray] = []
    firsts: list[np.ndarray] = []
    runnings: list[np.ndarray] = []

    # Future requests (lines 8-10).
    remaining = max(batch.size - batch.submitted, 0)
    future = batch.anchor + prof.r > now
    fut = np.flatnonzero(future)
    fut_arrival = batch.anchor + prof.r[fut]
    if true_future is not None:
        fut, fut_arrival = future_at_true_times(batch, prof, true_future)
    elif fut.size > remaining:  # the batch is ahead of its profile: only the last ones are left
        keep = np.argsort(prof.r[fut], kind="stable")[fut.size - remaining :]
        fut, fut_arrival = fut[keep], fut_arrival[keep]
    elif fut.size < remaining:  # behind its profile: the missing ones follow from now on
        past = np.flatnonzero(~future)
        late = past[np.argsort(prof.r[past], kind="stable")[past.size - (remaining - fut.size) :]]
        fut = np.concatenate([fut, late])
        fut_arrival = np.concatenate([fut_arrival, now + prof.r[late] - prof.r[late].min()])
    work = prof.s[fut].sum(axis=1) > 0
    arrivals.append(fut_arrival[work])
    services.append(prof.s[fut[work]])
    firsts.append(np.zeros(int(work.sum()), dtype=np.int64))
    runnings.append(np.zeros(int(work.sum()), dtype=bool))

    for stage, count in batch.queued.items():
        k = index.get(stage)
        if k is None or count <= 0:
            continue
        cand = np.flatnonzero(prof.s[:, k] > 0)
        if cand.size:
            pick = cand[rng.integers(0, cand.size, size=count)]
            svc = prof.s[pick].copy()
        else:
            svc = np.zeros((count, m))
            svc[:, k] = ctx.stages[k].timeout_s * ctx.options.default_stage_fraction
        svc[:, :k] = 0.0  # line 15: s_{i'k}, ..., s_{i'M}
        arrivals.append(np.full(count, now))
        services.append(svc)
        firsts.append(np.full(count, k, dtype=np.int64))
        runnings.append(np.zeros(count, dtype=bool))

    for stage, elapsed_list in batch.running_elapsed.items():
        k = index.get(stage)
        if k is None or not len(elapsed_list):
            continue
        elapsed = np.asarray(elapsed_list, dtype=float)
        cand = np.flatnonzero(prof.s[:, k] > 0)
        cand = cand[np.argsort(prof.s[cand, k], kind="stable")]
        sk = prof.s[cand, k]
        pos = np.searchsorted(sk, elapsed, side="right")
        have = pos < cand.size
        svc = np.zeros((elapsed.size, m))
        if have.any():
            span = cand.size - pos[have]
            choice = pos[have] + np.floor(rng.random(span.size) * span).astype(np.int64)
            picked = cand[choice]
            svc[have] = prof.s[picked]
            svc[have, k] = prof.s[picked, k] - elapsed[have]  # line 19: s_{i'k} − e_ik
        over = np.flatnonzero(~have)
        if over.size and cand.size and k + 1 < m:
            longest = cand[cand.size - max(int(np.ceil(cand.size * LONGEST_SHARE)), 1) :]
            svc[over, k + 1 :] = prof.s[longest[rng.integers(0, longest.size, size=over.size)], k + 1 :]
        svc[over, k] = np.maximum(ctx.stages[k].timeout_s - elapsed[over], 1.0)
        svc[:, :k] = 0.0
        arrivals.append(np.full(elapsed.size, now))
        services.append(svc)
        firsts.append(np.full(elapsed.size, k, dtype=np.int64))
        runnings.append(np.ones(elapsed.size, dtype=bool))

    arrival = np.concatenate(arrivals)
    return Workload(
        stage_names=names,
        arrival=arrival,
        service=np.concatenate(services, axis=0),
        first_stage=np.concatenate(firsts),
        running=np.concatenate(runnings),
        batch=np.zeros(arrival.size, dtype=np.int64),
        batch_keys=[batch.key],
        batch_T=np.array([batch.anchor + estimated_T(ctx, batch, prof)]),
        timeout_suffix=timeout_suffix(
            names, [s.timeout_s for s in ctx.stages], ctx.stages_of(batch.reward_type)
        )[None, :],
        now=now,
        debug={"source": prof.source},
    )


def collect(ctx: PlanContext, batches: Sequence[ActiveBatch] | None = None) -> Workload:
    """Alg. 2 over every active batch of every task (or the given subset)."""
    chosen = list(ctx.batches if batches is None else batches)
    reward_type_of = {b.task: b.reward_type for b in ctx.batches}
    truth = true_future_arrivals(ctx) if ctx.options.knowledge == "arrivals" else {}
    parts = [collect_batch(ctx, b, profile_arrays(ctx, b, reward_type_of), truth.get(b.key)) for b in chosen]
    wl = concat(parts, [s.name for s in ctx.stages], ctx.now)
    wl.debug["sources"] = {
        f"{b.task}/{b.batch_id}": p.debug.get("source") for b, p in zip(chosen, parts, strict=True)
    }
    return wl


def true_future_arrivals(ctx: PlanContext) -> dict[BatchKey, F64]:
    """Per active batch, the true arrival times of its ``size − submitted`` requests still to
    come, from ``ctx.oracle`` (requests that have arrived carry ``now`` there; the latest rows
    are the ones to come)."""
    if ctx.oracle is None:
        raise ValueError("knowledge beyond the estimate needs ctx.oracle; only the simulator has it")
    left = {b.key: max(b.size - b.submitted, 0) for b in ctx.batches}
    out: dict[BatchKey, F64] = {}
    for ob in ctx.oracle:
        waiting = (ob.first_stage == 0) & ~ob.running
        when = np.sort(ob.arrival[waiting])
        n = min(left.get(ob.key, 0), when.size)
        out[ob.key] = when[when.size - n :] if n else np.zeros(0)
    return out


def with_estimated_T(ctx: PlanContext, wl: Workload) -> Workload:
    """``wl`` (exact requests) with each batch's T_b as the estimate would have it."""
    reward_type_of = {b.task: b.reward_type for b in ctx.batches}
    by_key = {b.key: b for b in ctx.batches}
    T = wl.batch_T.copy()
    for i, key in enumerate(wl.batch_keys):
        b = by_key.get(key)
        if b is not None:
            T[i] = b.anchor + estimated_T(ctx, b, profile_arrays(ctx, b, reward_type_of))
    return replace(wl, batch_T=T)


def from_oracle(ctx: PlanContext, oracle: Sequence[OracleBatch]) -> Workload:
    """Exact remaining requests (the ``ideal`` policy's perfect knowledge)."""
    names = [s.name for s in ctx.stages]
    timeouts = [s.timeout_s for s in ctx.stages]
    parts = []
    for ob in oracle:
        keep = ob.service.sum(axis=1) > 0
        parts.append(
            Workload(
                stage_names=names,
                arrival=ob.arrival[keep],
                service=ob.service[keep],
                first_stage=ob.first_stage[keep],
                running=ob.running[keep],
                batch=np.zeros(int(keep.sum()), dtype=np.int64),
                batch_keys=[ob.key],
                batch_T=np.array([ob.earliest_completion]),
                timeout_suffix=timeout_suffix(names, timeouts, ctx.stages_of(ob.reward_type))[None, :],
                now=ctx.now,
            )
        )
    return concat(parts, names, ctx.now)
