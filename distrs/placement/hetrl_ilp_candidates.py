"""The candidates of the HetRL ILP (``hetrl_ilp.py``) and the bounds that prune them.

A candidate is one task run on one GPU group (a vector of GPU counts per node) with one strategy
and tasklet layout from the group builder's cost/memory Pareto front (``space.py``): the space
SHA-EA searches (``hetrl.py``), enumerated. Its costs are the cost model's, in integer
milliseconds (``SCALE``) for CP-SAT. ``candidate_bounds`` gives each candidate a lower bound on the
makespan of any plan that uses it, and ``prune`` drops those whose bound exceeds a known plan's
makespan; ``interchangeable_tasks`` and ``node_weights`` feed the model's symmetry breaking and
capacity cuts.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from distrs.placement.costmodel import (
    INFERENCE_TASKS,
    TRAINING_TASKS,
    CostModel,
    cv_allgather,
)
from distrs.placement.plan import ACTOR_TRAIN, GEN, TASK_KIND, TaskPlacement
from distrs.placement.space import Choice, GroupBuilder, layout, locality_order, pareto

SCALE = 1000.0  # seconds -> integer milliseconds
MB = 1e6


@dataclass(frozen=True)
class Candidate:
    task: str
    vector: tuple[int, ...]
    choice: Choice
    shared: bool
    mem_model: tuple[int, ...]  # MB per node: largest per-GPU model memory on that node
    mem_work: tuple[int, ...]
    nodes: tuple[int, ...] = ()  # node of each tasklet, in the candidate's layout
    reshard: float = 0.0
    allgather: float = 0.0
    broadcast: float = 0.0


def devices_for(cm: CostModel, vector: Sequence[int]) -> list[int]:
    out: list[int] = []
    for node, count in enumerate(vector):
        out.extend([d for d in range(cm.topo.n) if cm.node[d] == node][:count])
    return out


def weight_terms(cm: CostModel, task: str, p: TaskPlacement) -> dict[str, float]:
    """Per-candidate parts of the weight transfer (B.2 "Resharding" and "Synchronization")."""
    shape = cm.shape(ACTOR_TRAIN)
    s = p.strategy
    vol = cv_allgather(shape.layers, shape, s.pp * s.tp)
    rings = [cm.rings([cm.node[d] for d in p.replica_devices(i)], vol) for i in range(s.dp)]
    if task == ACTOR_TRAIN:  # C_reshard = max_i, C_sync's all-gather term = min_i
        return {"reshard": cm.reshard(p), "allgather": min(rings)}
    if task == GEN:  # C_sync's broadcast term = max_i'
        return {"broadcast": max(rings)}
    return {}


def candidates(cm: CostModel, builder: GroupBuilder) -> list[Candidate]:
    counts = [n.count for n in cm.topo.cluster.nodes]
    out: list[Candidate] = []
    for vector in itertools.product(*[range(c + 1) for c in counts]):
        if not any(vector):
            continue
        devices = devices_for(cm, vector)
        order = locality_order(cm, devices)
        for task in cm.tasks:
            variants = [False, True] if task == GEN and cm.wf.mode == "sync" else [False]
            for shared in variants:
                for ch in pareto(builder.ranked_choices(task, devices, shared)):
                    p = TaskPlacement(task, ch.strategy, layout(order, ch.strategy, ch.layout), ch.layers)
                    usage = cm.placement_memory(p, ch.layers, shared)
                    mm = [0] * len(counts)
                    mw = [0] * len(counts)
                    for d, (m, w) in usage.items():
                        n = cm.node[d]
                        mm[n] = max(mm[n], int(m / MB) + 1)
                        mw[n] = max(mw[n], int(w / MB) + 1)
                    out.append(
                        Candidate(
                            task,
                            tuple(vector),
                            ch,
                            shared,
                            tuple(mm),
                            tuple(mw),
                            tuple(cm.node[d] for d in p.devices),
                            **weight_terms(cm, task, p),
                        )
                    )
    return out


# ----------------------------------------------------------------------------- structure


def interchangeable_tasks(cm: CostModel) -> list[list[int]]:
    """Classes (by task index) of tasks that the cost model cannot tell apart: same kind and
    model shape, and no part in the weight transfer (generation and actor training have one)."""
    classes: dict[tuple[object, ...], list[int]] = {}
    for t, task in enumerate(cm.tasks):
        if task in (GEN, ACTOR_TRAIN):
            continue
        classes.setdefault((TASK_KIND[task], cm.shape(task)), []).append(t)
    return [c for c in classes.values() if len(c) > 1]


def stages(cm: CostModel) -> dict[str, list[int]]:
    """Task indices per stage of B.4: generation, inference (C^2-C^4), training (C^5, C^6)."""
    tasks = list(cm.tasks)
    return {
        "gen": [tasks.index(GEN)],
        "inf": [tasks.index(t) for t in INFERENCE_TASKS if t in tasks],
        "train": [tasks.index(t) for t in TRAINING_TASKS if t in tasks],
    }


def node_weights(cm: CostModel) -> list[list[int]]:
    """Weights λ per node for the capacity cuts: GPU count, TFLOPS and HBM bandwidth."""
    gpus = cm.topo.cluster.gpu_types
    nodes = cm.topo.cluster.nodes
    return [
        [1] * len(nodes),
        [max(1, round(gpus[n.gpu].tflops)) for n in nodes],
        [max(1, round(gpus[n.gpu].hbm_gbps)) for n in nodes],
    ]


def ms(x: float) -> int:
    return round(x * SCALE)


# ----------------------------------------------------------------------------- pruning


def downward_min(table: dict[tuple[int, ...], int], counts: Sequence[int]) -> dict[tuple[int, ...], int]:
    """f(c) = min of ``table`` over nonzero vectors u ≤ c (componentwise), for every c."""
    big = 10**12
    out: dict[tuple[int, ...], int] = {}
    for c in itertools.product(*[range(k + 1) for k in counts]):  # lexicographic: c - e_n first
        best = table.get(c, big)
        for n in range(len(c)):
            if c[n]:
                below = out[(*c[:n], c[n] - 1, *c[n + 1 :])]
                best = min(best, below)
        out[c] = best
    return out


@dataclass
class CandidateBounds:
    """Lower bounds (ms) on each stage and on the makespan given that a candidate is chosen."""

    stage: list[dict[str, int]]
    total: list[int]


def candidate_bounds(cm: CostModel, cands: Sequence[Candidate]) -> CandidateBounds:
    """If candidate c (vector v) is chosen, every other task either shares c's group — and so
    runs on v, adding its cost to c's when both are in one stage — or runs in another group on
    at most the GPUs left, N - v. A stage therefore lasts at least
    min over which stage-mates share the group of max(Σ shared costs on v, max other tasks'
    cheapest cost on ≤ N - v), and at least its λ-capacity bound (``node_weights``); the
    makespan combines the stages as in B.4 with the transfer term bounded by 0."""
    nodes = cm.topo.cluster.nodes
    counts = [n.count for n in nodes]
    full = tuple(counts)
    tasks = list(cm.tasks)
    nt = len(tasks)
    big = 10**12
    cost = [ms(c.choice.cost) for c in cands]
    lams = node_weights(cm)
    caps = [sum(lam[n] * counts[n] for n in range(len(nodes))) for lam in lams]
    on: list[dict[tuple[int, ...], int]] = [{} for _ in range(nt)]
    least_work = [[big] * len(lams) for _ in range(nt)]
    for i, c in enumerate(cands):
        t = tasks.index(c.task)
        on[t][c.vector] = min(on[t].get(c.vector, big), cost[i])
        for k, lam in enumerate(lams):
            work = cost[i] * sum(a * b for a, b in zip(lam, c.vector, strict=True))
            least_work[t][k] = min(least_work[t][k], work)
    within = [downward_min(on[t], counts) for t in range(nt)]
    st = stages(cm)
    gen_i = tasks.index(GEN)

    def may_share(a: int, b: int) -> bool:
        return not (cm.wf.mode == "async" and gen_i in (a, b))

    def stage_lb(members: list[int], t: int, i: int, v: tuple[int, ...]) -> int:
        rest = tuple(f - x for f, x in zip(full, v, strict=True))
        mates = [u for u in members if u != t]
        fixed = cost[i] if t in members else 0
        best = big
        for mask in range(1 << len(mates)):
            shared = [u for b, u in enumerate(mates) if mask >> b & 1]
            if any(not may_share(t, u) for u in shared):
                continue
            together = fixed + sum(on[u].get(v, big) for u in shared)
            apart = max((within[u][rest] for b, u in enumerate(mates) if not mask >> b & 1), default=0)
            best = min(best, max(together, apart))
        for k, cap in enumerate(caps):
            work = sum(least_work[u][k] for u in mates)
            if t in members:
                work += cost[i] * sum(a * b for a, b in zip(lams[k], v, strict=True))
            best = max(best, -(-work // cap))
        return min(best, big)

    out = CandidateBounds([], [])
    for i, c in enumerate(cands):
        t = tasks.index(c.task)
        lbs = {name: stage_lb(members, t, i, c.vector) for name, members in st.items()}
        out.stage.append(lbs)
        if cm.wf.mode == "sync":
            out.total.append(min(big, lbs["gen"] + lbs["inf"] + lbs["train"]))
        else:
            out.total.append(min(big, max(lbs["gen"], lbs["inf"] + lbs["train"])))
    return out


def prune(cm: CostModel, cands: Sequence[Candidate], upper_ms: int, rounds: int = 4) -> list[Candidate]:
    """Drop candidates whose makespan bound exceeds ``upper_ms``; they cannot be in a plan at
    least as good. Repeated, as bounds over fewer candidates are tighter."""
    kept = list(cands)
    for _ in range(rounds):
        bounds = candidate_bounds(cm, kept)
        nxt = [c for c, lb in zip(kept, bounds.total, strict=True) if lb <= upper_ms]
        if len(nxt) == len(kept) or any(not any(c.task == t for c in nxt) for t in cm.tasks):
            break
        kept = nxt
    return kept


# ----------------------------------------------------------------------------- model
