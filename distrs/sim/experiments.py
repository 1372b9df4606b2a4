"""The paper's evaluation as functions: policy comparison (Fig. 10-13), EBF vs FCFS (Fig. 14) and
planner running time (Fig. 15). Each returns plain data; ``report``/``plots`` render it and the
``distrs bench`` commands and ``benchmarks/scaling.py`` write it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distrs.core.history import BatchProfile, RequestProfile
from distrs.core.priority import QueuePolicy
from distrs.scaling.context import ActiveBatch, PlanContext, PolicyOptions
from distrs.scaling.policies import plan
from distrs.sim.cluster import ClusterParams, ReplayResult, replay
from distrs.sim.generator import GeneratorParams, generate
from distrs.sim.trace import Trace

DEFAULT_POLICIES = ("distrs", "history", "zq-dedicated", "ideal")


def _replay_one(args: tuple[Trace, ClusterParams]) -> ReplayResult:
    return replay(*args)


def compare_policies(
    trace: Trace,
    policies: Sequence[str] = DEFAULT_POLICIES,
    params: ClusterParams | None = None,
    jobs: int = 1,
) -> dict[str, ReplayResult]:
    """Replay the same trace under each policy, side by side in one run.

    ``jobs`` > 1 replays that many policies at once in worker processes (each replay is
    single-threaded and independent, so the results are the same as with ``jobs=1``; only the
    planner's wall time per decision can differ when the machine has fewer free cores).
    """
    base = params or ClusterParams()
    work = [(trace, replace(base, policy=name)) for name in policies]
    if jobs <= 1 or len(work) <= 1:
        return {name: _replay_one(w) for name, w in zip(policies, work, strict=True)}
    # Longest first so the slow policies do not end up last on one worker.
    order = sorted(range(len(work)), key=lambda i: _COST.get(policies[i], 1.0), reverse=True)
    with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
        done = dict(zip(order, pool.map(_replay_one, [work[i] for i in order]), strict=True))
    return {name: done[i] for i, name in enumerate(policies)}


# Relative replay time per policy (measured on cuda-colocated), to schedule the slow ones first.
_COST = {"ideal": 4.0, "history": 3.0, "distrs": 2.5, "zq-dedicated": 0.5, "static": 0.2}


def ratios(results: dict[str, ReplayResult]) -> dict[str, Any]:
    """Worker-second ratios the paper reports: ZQ-Dedicated / DistRS and DistRS / ideal per stage."""
    out: dict[str, Any] = {}
    d = results.get("distrs")
    if d is None:
        return out
    for other, key in (
        ("zq-dedicated", "zq_over_distrs"),
        ("ideal", "distrs_over_ideal"),
        ("history", "history_over_distrs"),
    ):
        r = results.get(other)
        if r is None:
            continue
        if key == "distrs_over_ideal":
            out[key] = {s: _div(d.worker_seconds[s], r.worker_seconds[s]) for s in d.stages}
        else:
            out[key] = {s: _div(r.worker_seconds[s], d.worker_seconds[s]) for s in d.stages}
    out["normalized_worker_seconds"] = {
        name: {s: _div(r.worker_seconds[s], r.busy_seconds[s]) for s in r.stages}
        for name, r in results.items()
    }
    return out


def _div(a: float, b: float) -> float | None:
    return round(a / b, 4) if b > 0 else None


# --- Fig. 14: EBF vs FCFS ---------------------------------------------------------------------


@dataclass(frozen=True)
class EbfPoint:
    gpus: int
    ebf_delay_s: float
    fcfs_delay_s: float


def two_batch_trace(trace: Trace, gap_s: float = 100.0, iteration: int = 0) -> Trace:
    """Two batches ``gap_s`` apart: iteration ``iteration`` of the first two tasks (or of one task,
    twice), each re-anchored so the second rollout starts ``gap_s`` after the first."""
    tasks = sorted(set(trace.task.tolist()))
    picks = [(tasks[0], iteration), (tasks[1], iteration) if len(tasks) > 1 else (tasks[0], iteration + 1)]
    parts = []
    for j, (task, it) in enumerate(picks):
        sel = trace.select((trace.task == task) & (trace.iteration == it))
        if sel.n == 0:
            raise ValueError(f"trace has no batch for task index {task}, iteration {it}")
        shift = j * gap_s - float(sel.rollout_start[0])
        sel.rollout_start = sel.rollout_start + shift
        sel.arrival = sel.arrival + shift
        sel.task = np.full(sel.n, j)
        sel.iteration = np.zeros(sel.n, dtype=np.int64)
        parts.append(sel)
    a, b = parts
    return Trace(
        mode="disaggregated",
        stages=trace.stages,
        task_names=["first", "second"],
        status_names=trace.status_names,
        task=np.concatenate([a.task, b.task]),
        iteration=np.concatenate([a.iteration, b.iteration]),
        request=np.concatenate([a.request, b.request]),
        rollout_start=np.concatenate([a.rollout_start, b.rollout_start]),
        arrival=np.concatenate([a.arrival, b.arrival]),
        status=np.concatenate([a.status, b.status]),
        s=np.concatenate([a.s, b.s]),
    )


def ebf_sweep(
    trace: Trace, gpu_counts: Sequence[int], gpu_stage: str | None = None, cpu_workers: int = 4096
) -> list[EbfPoint]:
    """Mean extra delay of two batches 100 s apart vs the number of GPU workers (static pools;
    other stages unconstrained), under EBF and FCFS. EBF ranks by each batch's true T."""
    names = [s.name for s in trace.stages]
    gpu = gpu_stage or next((s.name for s in trace.stages if str(s.resource) == "gpu"), names[-1])
    out = []
    for n in gpu_counts:
        reps = {name: (n if name == gpu else cpu_workers) for name in names}
        delays = {}
        for qp in (QueuePolicy.EBF, QueuePolicy.FCFS):
            p = ClusterParams(
                policy="static",
                queue_policy=qp,
                cold_start_s=0.0,
                oracle_priority=True,
                options=PolicyOptions(static_replicas=reps),
            )
            r = replay(trace, p)
            delays[qp] = float(np.mean([b.extra_delay for b in r.batches]))
        out.append(EbfPoint(int(n), delays[QueuePolicy.EBF], delays[QueuePolicy.FCFS]))
    return out


def gpus_needed(points: Sequence[EbfPoint], threshold_s: float) -> dict[str, int | None]:
    """Fewest GPUs whose mean extra delay is ≤ threshold, for EBF and FCFS."""

    def first(vals: list[tuple[int, float]]) -> int | None:
        return next((g for g, d in sorted(vals) if d <= threshold_s), None)

    return {
        "ebf": first([(p.gpus, p.ebf_delay_s) for p in points]),
        "fcfs": first([(p.gpus, p.fcfs_delay_s) for p in points]),
    }


# --- Fig. 15: planner running time ------------------------------------------------------------


@dataclass(frozen=True)
class RuntimePoint:
    batches: int
    requests: int
    seconds: float
    cpu_seconds: float
    stage_seconds: dict[str, float]
    simulations: int
    replan_seconds: float = 0.0
    """The next decision, ``replan_s`` later with nothing else changed: what the planner does
    every interval, starting from the previous answer (``warm_start``, ``search_hint``)."""
    replan_cpu_seconds: float = 0.0
    replan_simulations: int = 0


def _profiles(trace: Trace) -> list[BatchProfile]:
    names = [s.name for s in trace.stages]
    out = []
    for it in sorted(set(trace.iteration.tolist())):
        sel = np.flatnonzero(trace.iteration == it)
        anchor = float(trace.rollout_start[sel[0]])
        reqs = tuple(
            RequestProfile(
                float(trace.arrival[i]) - anchor, dict(zip(names, trace.s[i].tolist(), strict=True))
            )
            for i in sel
        )
        out.append(BatchProfile("t", str(it), anchor, reqs, "cuda"))
    return out


def _timed(ctx: PlanContext, repeats: int) -> tuple[float, float, Any]:
    """Best wall time of ``repeats`` decisions on ``ctx``: (wall, CPU, decision)."""
    best = None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        dec = plan(ctx)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if best is None or dt < best[0]:
            best = (dt, dc, dec)
    assert best is not None
    return best


def planner_runtime(
    batch_counts: Sequence[int] = (1, 2, 4, 6, 8, 12, 16, 20),
    repeats: int = 3,
    stagger_s: float = 30.0,
    seed: int = 11,
    replan_s: float = 5.0,
) -> list[RuntimePoint]:
    """Time one ``distrs`` decision over k active batches (k tasks, each with one finished batch
    as history, rollouts starting ``stagger_s`` apart), best of ``repeats``: the first (no
    previous answer) and the re-plan ``replan_s`` later, as the planner makes it every interval
    (its previous answer as the hint, the planner's default scale-down margin)."""
    k_max = max(batch_counts)
    trace = generate(GeneratorParams(tasks=1, iterations=k_max, batch=2048, seed=seed))
    profiles = _profiles(trace)
    stages = trace.stages
    out = []
    for k in batch_counts:
        hist = {f"task-{i}": [profiles[i]] for i in range(k)}
        batches = [
            ActiveBatch(f"task-{i}", "next", "cuda", 2048, anchor=1000.0 + i * stagger_s) for i in range(k)
        ]
        ctx = PlanContext(
            now=1000.0,
            stages=stages,
            batches=batches,
            histories=hist,
            max_extra_delay_s=2.0,
            max_replicas=100_000,
        )
        dt, dc, dec = _timed(ctx, repeats)
        again = replace(
            ctx,
            now=ctx.now + replan_s,
            options=replace(
                ctx.options,
                warm_start=dict(dec.replicas),
                search_hint=dict(dec.debug["search"]),
                scale_down_margin_s=15.0,
            ),
        )
        rt, rc, redec = _timed(again, repeats)
        out.append(
            RuntimePoint(
                batches=k,
                requests=int(dec.debug["requests"]),
                seconds=dt,
                cpu_seconds=dc,
                stage_seconds=dict(dec.debug["stage_seconds"]),
                simulations=int(dec.debug["simulations"]),
                replan_seconds=rt,
                replan_cpu_seconds=rc,
                replan_simulations=int(redec.debug["simulations"]),
            )
        )
    return out
