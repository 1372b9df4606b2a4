"""HetRL ILP-based scheduler (§3.5), solved with OR-Tools CP-SAT, for small clusters.

Why this shape: §3.5 turns the hybrid scheduler's search space into binaries and minimises the
makespan exactly. A literal per-GPU formulation is hopeless beyond a few GPUs (interchangeable
GPUs multiply every solution), so the model below keeps the *same space* as SHA-EA (``space``,
``hetrl``) but states it over node-count vectors and strengthens it with valid cuts.

Space (identical to SHA-EA's): task groups (Level 1), a GPU group per task group that together
use every GPU of the cluster (Level 2 are compositions of N), and per task a strategy and
tasklet layout from the builder's cost/memory Pareto front (Levels 4-5). GPUs of one node are
interchangeable in the cost model, so a GPU group is a vector ``v`` of GPU counts per node.

Binaries:

* ``x[c, g]`` — candidate c = (task, v, strategy, layout) runs in group g (§3.5: "for each RL
  task, we enumerate all feasible parallelization strategies ... and associate each strategy
  with a binary decision variable"; the node-count vector stands for the tasklet-to-GPU
  assignment);
* ``w[g, v]`` — group g holds the GPUs of vector v; a candidate may only run in a group with
  its vector; groups are labelled by their first task; Σ over groups of the GPUs taken from each
  node = the node's GPUs (C1, C2 and Level 2's "every GPU belongs to one group");
* C3 per group and node: Σ model memory of the members + the working memory of any member ≤
  usable memory (per node the largest per-GPU figure of each task);
* stage times — generation, inference, training — with the dependencies of B.4: a stage lasts
  at least the summed cost of its tasks in every group (Φ per group with η = 0), so across
  groups the max; weight transfer is resharding when generation and actor training share a
  group, else the C_sync of B.2 (all-gather + broadcast + the cheapest node pair, binaries q).

Strengthening (each keeps every optimal solution):

* symmetry breaking: tasks that are interchangeable in the cost model (same kind, same model
  shape, no weight-transfer role — e.g. reward/reference/critic inference of one model) are
  ordered: the earlier one sits in a group with a label no larger than the later one's, and in
  one group picks a candidate of no larger rank;
* capacity cuts: groups are disjoint, so for any node weights λ ≥ 0 a stage lasting p satisfies
  p·Σ_n λ_n·|node n| ≥ Σ_tasks cost·Σ_n λ_n·v_n; λ = 1, TFLOPS and HBM bandwidth are added,
  which bounds every stage by its work on the whole cluster's speed;
* warm start: a short SHA-EA run gives a plan that is passed as a solution hint and an upper
  bound U; candidates whose own lower bound on the makespan exceeds U are dropped before the
  model is built (they cannot be in any plan at least as good as the hint).

Candidate costs come from the same ``CostModel`` (milliseconds, rounded); the decoded plan is
re-evaluated by it. The candidates, their bounds and the pruning: ``hetrl_ilp_candidates.py``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from ortools.sat.python import cp_model

from distrs.placement.costmodel import (
    B_BF16,
    INF,
    CostModel,
    Evaluation,
)
from distrs.placement.hetrl_ilp_candidates import (
    MB,
    SCALE,
    Candidate,
    CandidateBounds,
    candidate_bounds,
    candidates,
    interchangeable_tasks,
    ms,
    node_weights,
    prune,
    stages,
)
from distrs.placement.plan import ACTOR_TRAIN, GEN, Plan, TaskGroup, TaskPlacement
from distrs.placement.space import GroupBuilder, layout, locality_order

Expr: TypeAlias = cp_model.LinearExpr | int  # a linear expression over the model's variables


@dataclass
class IlpStats:
    candidates: int = 0
    candidates_pruned: int = 0
    build_s: float = 0.0
    solve_s: float = 0.0
    warm_start_s: float = 0.0
    warm_start_s_per_iter: float = INF
    status: str = ""
    objective_s: float = INF
    bound_s: float = 0.0
    optimal: bool = False


@dataclass
class IlpModel:
    """The CP-SAT model with handles on its decision variables."""

    cm: CostModel
    cands: list[Candidate]
    m: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    w: dict[tuple[int, tuple[int, ...]], cp_model.IntVar] = field(default_factory=dict)
    groups_of: dict[int, list[int]] = field(default_factory=dict)
    by_task: dict[int, list[int]] = field(default_factory=dict)
    vectors: list[tuple[int, ...]] = field(default_factory=list)
    colocated: Expr = 0
    bounds: CandidateBounds | None = None

    @property
    def nt(self) -> int:
        return len(self.cm.tasks)

    def cost(self, i: int) -> int:
        return ms(self.cands[i].choice.cost)

    def in_group(self, t: int, g: int) -> Expr:
        """1 when task t runs in group g (a 0/1 expression)."""
        if g not in self.groups_of[t]:
            return 0
        return sum(self.x[i, g] for i in self.by_task[t])

    def task_terms(self, t: int, value: Callable[[int], int]) -> Expr:
        """Σ over task t's candidates and groups of x·value(candidate)."""
        return sum(self.x[i, g] * value(i) for i in self.by_task[t] for g in self.groups_of[t] if value(i))

    # -- Levels 1-3 ------------------------------------------------------------------------

    def add_assignment(self) -> None:
        cm, m, nt = self.cm, self.m, self.nt
        tasks = list(cm.tasks)
        gen_i = tasks.index(GEN)
        self.vectors = sorted({c.vector for c in self.cands})
        self.by_task = {t: [i for i, c in enumerate(self.cands) if c.task == tasks[t]] for t in range(nt)}
        # group g is labelled by its first task (index g): task t may join groups g <= t only
        self.groups_of = {t: list(range(t + 1)) for t in range(nt)}
        if cm.wf.mode == "async":  # generation keeps a group of its own
            for t in range(nt):
                if t != gen_i:
                    self.groups_of[t] = [g for g in self.groups_of[t] if g != gen_i]
        for g in range(nt):
            for vi, v in enumerate(self.vectors):
                self.w[g, v] = m.new_bool_var(f"w{g}_{vi}")
        for t in range(nt):
            for i in self.by_task[t]:
                for g in self.groups_of[t]:
                    self.x[i, g] = m.new_bool_var(f"x{i}_{g}")
            m.add_exactly_one(self.x[i, g] for i in self.by_task[t] for g in self.groups_of[t])
        for g in range(nt):
            # group g exists iff its labelling task is in it, and then holds that task's vector;
            # every other member runs a candidate of the same vector
            m.add(sum(self.w[g, v] for v in self.vectors) == self.in_group(g, g))
            per_vector: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}
            for t in range(nt):
                if g in self.groups_of[t]:
                    for i in self.by_task[t]:
                        per_vector.setdefault((t, g, self.cands[i].vector), []).append(i)
            for (t, _, v), members in per_vector.items():
                picked = sum(self.x[i, g] for i in members)
                if t == g:
                    m.add(picked == self.w[g, v])
                else:
                    m.add(picked <= self.w[g, v])
        nodes = cm.topo.cluster.nodes
        for n in range(len(nodes)):  # groups are disjoint and cover the cluster (C1, C2, Level 2)
            m.add(sum(self.w[g, v] * v[n] for g in range(nt) for v in self.vectors if v[n]) == nodes[n].count)

    def add_colocation(self) -> None:
        """Generation may reuse the actor-training weights only in their common group (sync)."""
        tasks = list(self.cm.tasks)
        gen_i, train_i = tasks.index(GEN), tasks.index(ACTOR_TRAIN)
        self.colocated = self.in_group(train_i, gen_i) if gen_i == 0 else 0
        for i in self.by_task[gen_i]:
            if self.cands[i].shared:
                for g in self.groups_of[gen_i]:
                    self.m.add(self.x[i, g] <= self.colocated)

    def add_symmetry_breaking(self) -> None:
        """Order interchangeable tasks: group labels non-decreasing, ranks within a group too.

        Valid because swapping the roles of two interchangeable tasks x < y whose groups have
        labels m_x > m_y lowers x's label to m_y and leaves the labels of tasks before x alone,
        so the lexicographically smallest relabelling of any plan satisfies both orders.
        """
        for cls in interchangeable_tasks(self.cm):
            if not self._same_candidates(cls):
                continue
            for a, b in itertools.combinations(cls, 2):
                label = {t: sum(g * self.in_group(t, g) for g in self.groups_of[t] if g) for t in (a, b)}
                self.m.add(label[a] <= label[b])
                big = len(self.by_task[b])
                for g in set(self.groups_of[a]) & set(self.groups_of[b]):
                    rank_a = sum(r * self.x[i, g] for r, i in enumerate(self.by_task[a]) if r)
                    rank_b = sum(r * self.x[i, g] for r, i in enumerate(self.by_task[b]) if r)
                    self.m.add(rank_a <= rank_b + big * (1 - self.in_group(b, g)))

    def _same_candidates(self, cls: Sequence[int]) -> bool:
        def key(i: int) -> tuple[object, ...]:
            c = self.cands[i]
            return (c.vector, c.choice, c.mem_model, c.mem_work)

        first = [key(i) for i in self.by_task[cls[0]]]
        return all([key(i) for i in self.by_task[t]] == first for t in cls[1:])

    # -- C3 --------------------------------------------------------------------------------

    def add_memory(self) -> None:
        """Per group and node: Σ model memory of the members + any member's working memory."""
        cm, nt = self.cm, self.nt
        nodes = cm.topo.cluster.nodes
        caps = [
            int(cm.opts.memory_utilization * cm.topo.cluster.gpu_types[n.gpu].memory_gb * 1e9 / MB)
            for n in nodes
        ]
        for g in range(nt):
            members = [t for t in range(nt) if g in self.groups_of[t]]
            if len(members) == 1:
                continue  # candidates already fit alone
            for n in range(len(nodes)):
                model = sum(
                    self.x[i, g] * self.cands[i].mem_model[n]
                    for t in members
                    for i in self.by_task[t]
                    if self.cands[i].mem_model[n]
                )
                for t in members:
                    work = sum(
                        self.x[i, g] * self.cands[i].mem_work[n]
                        for i in self.by_task[t]
                        if self.cands[i].mem_work[n]
                    )
                    self.m.add(model + work <= caps[n])

    # -- B.4 -------------------------------------------------------------------------------

    def stage_time(self, members: list[int], horizon: int, name: str) -> cp_model.IntVar:
        """A stage lasts at least: each group's summed task costs, each task's cost, and (groups
        being disjoint) its λ-weighted work over the cluster's λ-capacity, for every λ."""
        m, nt = self.m, self.nt
        nodes = self.cm.topo.cluster.nodes
        p = m.new_int_var(0, horizon, name)
        for g in range(nt):
            terms = [
                self.x[i, g] * self.cost(i)
                for t in members
                if g in self.groups_of[t]
                for i in self.by_task[t]
            ]
            if terms:
                m.add(p >= sum(terms))
        for t in members:
            m.add(p >= self.task_terms(t, self.cost))
        for lam in node_weights(self.cm):
            cap = sum(lam[n] * nodes[n].count for n in range(len(nodes)))
            m.add(cap * p >= sum((self.task_terms(t, self._work(lam)) for t in members), start=0))
        return p

    def _work(self, lam: Sequence[int]) -> Callable[[int], int]:
        """Candidate i's cost times the λ-weight of its GPUs."""
        return lambda i: self.cost(i) * sum(a * b for a, b in zip(lam, self.cands[i].vector, strict=True))

    def transfer(self) -> cp_model.IntVar:
        """Weight transfer: C_reshard when generation and actor training share a group, else
        C_sync = min_i all-gather + max_i' broadcast + C_p2p (B.2)."""
        cm, m = self.cm, self.m
        tasks = list(cm.tasks)
        gen_i, train_i = tasks.index(GEN), tasks.index(ACTOR_TRAIN)
        nn = len(cm.topo.cluster.nodes)
        shape = cm.shape(ACTOR_TRAIN)
        vol = B_BF16 * shape.layers * shape.params_per_layer
        uses = {
            (t, n): sum(
                self.x[i, g] for i in self.by_task[t] for g in self.groups_of[t] if self.cands[i].vector[n]
            )
            for t in (gen_i, train_i)
            for n in range(nn)
        }
        co = self.colocated
        q = {(a, b): m.new_bool_var(f"q{a}_{b}") for a in range(nn) for b in range(nn)}
        m.add(sum(q.values()) == 1 - co)
        for (a, b), qv in q.items():
            m.add(qv <= uses[train_i, a])
            m.add(qv <= uses[gen_i, b])
        pair = {(a, b): ms(cm.rings.min_pair([a], [b], vol)) for a in range(nn) for b in range(nn)}
        p2p = sum(qv * pair[k] for k, qv in q.items())
        together = sum(
            self.x[i, gen_i] * ms(self.cands[i].reshard)
            for i in self.by_task[train_i]
            if gen_i in self.groups_of[train_i]
        )
        apart = sum(
            self.x[i, g] * ms(self.cands[i].allgather)
            for i in self.by_task[train_i]
            for g in self.groups_of[train_i]
            if g != gen_i
        )
        bcast = self.task_terms(gen_i, lambda i: ms(self.cands[i].broadcast))
        big = max(ms(self.cands[i].broadcast) for i in self.by_task[gen_i]) + max(pair.values())
        out = m.new_int_var(0, 10**9, "transfer")
        m.add(out >= together + apart)
        m.add(out >= together + apart + bcast + p2p - big * co)
        return out

    def add_objective(self) -> cp_model.IntVar:
        cm, m, nt = self.cm, self.m, self.nt
        st = stages(cm)
        horizon = sum(max(self.cost(i) for i in self.by_task[t]) for t in range(nt)) + 1
        gen_time = self.task_terms(st["gen"][0], self.cost)
        p2 = self.stage_time(st["inf"], horizon, "p2")
        p3 = self.stage_time(st["train"], horizon, "p3")
        transfer = self.transfer()
        total = m.new_int_var(0, 10**9, "total")
        if self.bounds is not None:  # exactly one candidate per task: its bounds hold
            b = self.bounds
            for t in range(nt):
                m.add(total >= self.task_terms(t, lambda i: b.total[i]))
                m.add(p2 >= self.task_terms(t, lambda i: b.stage[i]["inf"]))
                m.add(p3 >= self.task_terms(t, lambda i: b.stage[i]["train"]))
        if cm.wf.mode == "sync":  # C_SyncPPO = C^1 + Φ({C^2,C^3,C^4}) + Φ({C^5,C^6}) + C_reshard (B.4)
            m.add(total >= gen_time + p2 + p3 + transfer)
        else:  # C_AsyncPPO = max(C^1, Φ({C^2,C^3,C^4}) + Φ({C^5,C^6})) + C_sync (B.4)
            m.add(total >= gen_time + transfer)
            m.add(total >= p2 + p3 + transfer)
        m.minimize(total)
        return total

    # -- warm start and decoding -----------------------------------------------------------

    def decode(self, solver: cp_model.CpSolver) -> Plan:
        cm = self.cm
        tasks = list(cm.tasks)
        nn = len(cm.topo.cluster.nodes)
        free = {n: [d for d in range(cm.topo.n) if cm.node[d] == n] for n in range(nn)}
        groups = []
        for g in range(self.nt):
            vec = next((v for v in self.vectors if solver.value(self.w[g, v])), None)
            if vec is None:
                continue
            chosen = [
                (tasks[t], self.cands[i])
                for t in range(self.nt)
                if g in self.groups_of[t]
                for i in self.by_task[t]
                if solver.value(self.x[i, g])
            ]
            devs: list[int] = []
            for n in range(nn):
                devs.extend(free[n][: vec[n]])
                free[n] = free[n][vec[n] :]
            order = locality_order(cm, devs)
            placements = tuple(
                TaskPlacement(
                    t, c.choice.strategy, layout(order, c.choice.strategy, c.choice.layout), c.choice.layers
                )
                for t, c in chosen
            )
            groups.append(TaskGroup(tuple(t for t, _ in chosen), tuple(devs), placements))
        return Plan(tuple(groups), "hetrl-ilp")


def build_model(cm: CostModel, cands: list[Candidate], strengthen: bool = True) -> IlpModel:
    """The ILP; ``strengthen=False`` leaves out the symmetry breaking and the candidate bounds
    (same optimum, weaker relaxation), for checking that they cut no optimal plan off."""
    model = IlpModel(cm, cands, bounds=candidate_bounds(cm, cands) if strengthen else None)
    model.add_assignment()
    model.add_colocation()
    if strengthen:
        model.add_symmetry_breaking()
    model.add_memory()
    model.add_objective()
    return model


def plan_candidates(cm: CostModel, cands: Sequence[Candidate], plan: Plan) -> dict[Candidate, int] | None:
    """The plan as (candidate → group label), or None when one of its choices is no candidate."""
    tasks = list(cm.tasks)
    index = {(c.task, c.vector, c.choice.strategy, c.choice.layers, c.nodes, c.shared): c for c in cands}
    shared = cm.wf.mode == "sync" and plan.group_of(GEN) is plan.group_of(ACTOR_TRAIN)
    out: dict[Candidate, int] = {}
    for grp in plan.groups:
        label = min(tasks.index(t) for t in grp.tasks)
        vector = tuple(
            sum(1 for d in grp.devices if cm.node[d] == n) for n in range(len(cm.topo.cluster.nodes))
        )
        for p in grp.placements:
            nodes = tuple(cm.node[d] for d in p.devices)
            c = index.get((p.task, vector, p.strategy, p.layers, nodes, shared and p.task == GEN))
            if c is None:
                return None
            out[c] = label
    return out


def fits_model_memory(cm: CostModel, chosen: dict[Candidate, int]) -> bool:
    """Whether chosen candidates meet the model's per-node C3 (it is stricter than per GPU)."""
    nodes = cm.topo.cluster.nodes
    caps = [
        int(cm.opts.memory_utilization * cm.topo.cluster.gpu_types[n.gpu].memory_gb * 1e9 / MB) for n in nodes
    ]
    by_group: dict[int, list[Candidate]] = {}
    for c, g in chosen.items():
        by_group.setdefault(g, []).append(c)
    for members in by_group.values():
        if len(members) == 1:
            continue
        for n in range(len(nodes)):
            if sum(c.mem_model[n] for c in members) + max(c.mem_work[n] for c in members) > caps[n]:
                return False
    return True


def warm_start(cm: CostModel, budget_s: float) -> tuple[Plan | None, Evaluation | None]:
    from distrs.placement import hetrl  # the ILP's warm start is the hybrid scheduler's plan

    plan, ev, _ = hetrl.schedule(cm, budget_s=budget_s, seed=0)
    return plan, ev


def schedule(
    cm: CostModel,
    time_limit_s: float = 180.0,
    workers: int = 2,
    warm_start_s: float | None = None,
) -> tuple[Plan | None, Evaluation | None, IlpStats]:
    """Solve the ILP within ``time_limit_s`` (warm start, candidates and model included)."""
    stats = IlpStats()
    t0 = time.perf_counter()
    if warm_start_s is None:
        warm_start_s = min(20.0, 0.1 * time_limit_s)
    hint_plan, hint_ev = warm_start(cm, warm_start_s) if warm_start_s > 0 else (None, None)
    stats.warm_start_s = time.perf_counter() - t0
    if hint_ev is not None and hint_ev.feasible:
        stats.warm_start_s_per_iter = hint_ev.total
    cands = candidates(cm, GroupBuilder(cm))
    stats.candidates = len(cands)
    model = _model_with_hint(cm, cands, hint_plan, hint_ev, stats)
    if model is None:
        return None, None, stats
    stats.build_s = time.perf_counter() - t0 - stats.warm_start_s
    t1 = time.perf_counter()
    status, solver = solve(model, time_limit_s - (t1 - t0), workers)
    stats.solve_s = time.perf_counter() - t1
    stats.status = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, stats
    stats.optimal = status == cp_model.OPTIMAL
    stats.objective_s = solver.objective_value / SCALE
    stats.bound_s = solver.best_objective_bound / SCALE
    plan = model.decode(solver)
    ev = cm.evaluate(plan)
    return (
        plan.with_algorithm("hetrl-ilp", search_s=time.perf_counter() - t0, ilp_status=stats.status),
        ev,
        stats,
    )


def solve(
    model: IlpModel, time_limit_s: float, workers: int = 2
) -> tuple[cp_model.CpSolverStatus, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(1.0, time_limit_s)
    solver.parameters.num_workers = workers
    solver.parameters.linearization_level = 2
    return solver.solve(model.m), solver


def _model_with_hint(
    cm: CostModel,
    cands: list[Candidate],
    hint_plan: Plan | None,
    hint_ev: Evaluation | None,
    stats: IlpStats,
) -> IlpModel | None:
    """Build the model; with a warm-start plan that is a model solution, prune by its makespan
    and hint it, otherwise build the full model."""
    if any(not any(c.task == t for c in cands) for t in cm.tasks):
        return None
    chosen = None
    if hint_plan is not None and hint_ev is not None and hint_ev.feasible:
        chosen = plan_candidates(cm, cands, hint_plan)
    if chosen is None or not fits_model_memory(cm, chosen) or hint_ev is None:
        return build_model(cm, cands)
    # each rounded term of the model's objective is off by ≤ 0.5 ms: a margin of one
    # millisecond per term keeps the hint a solution of the pruned model
    kept = prune(cm, cands, ms(hint_ev.total) + len(cm.tasks) + 4)
    if any(c not in set(kept) for c in chosen):
        return build_model(cm, cands)
    stats.candidates_pruned = len(cands) - len(kept)
    model = build_model(cm, kept)
    position = {c: i for i, c in enumerate(model.cands)}
    hinted = {(position[c], g) for c, g in chosen.items()}
    for key, var in model.x.items():
        model.m.add_hint(var, int(key in hinted))
    used = {(g, c.vector) for c, g in chosen.items()}
    for group_vector, var in model.w.items():
        model.m.add_hint(var, int(group_vector in used))
    return model
