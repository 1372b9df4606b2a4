"""HetRL ILP-based scheduler (§3.5), solved with OR-Tools CP-SAT, for small clusters.

The ILP keeps the search space of the hybrid scheduler (``space``): task groups, GPU groups,
a parallel strategy and tasklet layout per task. GPUs of one node are interchangeable in the
cost model, so a GPU group is a vector ``v`` of GPU counts per node. Binary decisions:

* ``x[c, g]`` — task t runs candidate c = (t, v, strategy, layout) in group g ("for each RL
  task, we enumerate all feasible parallelization strategies ... and associate each strategy
  with a binary decision variable"; the node-count vector stands for the tasklet-to-GPU
  assignment); per (t, v) only the candidates on the cost/memory Pareto front are kept;
* ``w[g, v]`` — group g holds the GPUs of vector v; a candidate may only run in a group with
  its vector; groups are labelled by their first task (symmetry breaking); Σ over groups of
  the GPUs taken from each node ≤ the node's GPUs (C1, C2);
* C3 per group and node: Σ model memory of the members + the working memory of any member ≤
  usable memory (largest per-GPU figure on that node, slightly stricter than the per-GPU check
  of the cost model when a group's tasks put different stages on one node);
* time variables per stage — generation, inference, training — with the dependencies
  generation → inference → training: a stage lasts at least the summed cost of its tasks in
  every group (tasks of a group share its GPUs), so across groups the max (B.4 with Φ applied
  per group); weight transfer: resharding when generation and actor training share a group,
  else all-gather + broadcast + the cheapest point-to-point node pair (binaries ``q``).

Every constraint is linear in the binaries (no big-M on the task-to-group choice), which keeps
the LP relaxation tight. The objective is the makespan, i.e. the B.4 end-to-end cost. Candidate
costs come from the same ``CostModel`` (milliseconds, rounded) and the decoded plan is
re-evaluated by it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from distrs.placement.costmodel import (
    B_BF16,
    INF,
    INFERENCE_TASKS,
    TRAINING_TASKS,
    CostModel,
    Evaluation,
    cv_allgather,
)
from distrs.placement.plan import ACTOR_TRAIN, GEN, Plan, TaskGroup, TaskPlacement
from distrs.placement.space import Choice, GroupBuilder, layout, locality_order, pareto

SCALE = 1000.0  # seconds -> integer milliseconds
MB = 1e6


@dataclass
class IlpStats:
    candidates: int = 0
    build_s: float = 0.0
    solve_s: float = 0.0
    status: str = ""
    objective_s: float = INF
    bound_s: float = 0.0
    optimal: bool = False


@dataclass(frozen=True)
class Candidate:
    task: str
    vector: tuple[int, ...]
    choice: Choice
    shared: bool
    mem_model: tuple[int, ...]  # MB per node: largest per-GPU model memory on that node
    mem_work: tuple[int, ...]
    reshard: float = 0.0
    allgather: float = 0.0
    broadcast: float = 0.0


def _devices_for(cm: CostModel, vector: tuple[int, ...]) -> list[int]:
    out: list[int] = []
    for node, count in enumerate(vector):
        out.extend([d for d in range(cm.topo.n) if cm.node[d] == node][:count])
    return out


def _candidates(cm: CostModel, builder: GroupBuilder) -> list[Candidate]:
    counts = [n.count for n in cm.topo.cluster.nodes]
    out: list[Candidate] = []
    shape = cm.shape(ACTOR_TRAIN)
    for vector in itertools.product(*[range(c + 1) for c in counts]):
        if not any(vector):
            continue
        devices = _devices_for(cm, vector)
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
                    extra = {}
                    if task == ACTOR_TRAIN:
                        extra["reshard"] = cm.reshard(p)
                        s = ch.strategy
                        extra["allgather"] = min(
                            cm.rings(
                                [cm.node[d] for d in p.replica_devices(i)],
                                cv_allgather(shape.layers, shape, s.pp * s.tp),
                            )
                            for i in range(s.dp)
                        )
                    if task == GEN:
                        s = ch.strategy
                        extra["broadcast"] = max(
                            cm.rings(
                                [cm.node[d] for d in p.replica_devices(i)],
                                cv_allgather(shape.layers, shape, s.pp * s.tp),
                            )
                            for i in range(s.dp)
                        )
                    out.append(Candidate(task, tuple(vector), ch, shared, tuple(mm), tuple(mw), **extra))
    return out


def schedule(
    cm: CostModel, time_limit_s: float = 180.0, workers: int = 2
) -> tuple[Plan | None, Evaluation | None, IlpStats]:
    stats = IlpStats()
    t0 = time.perf_counter()
    builder = GroupBuilder(cm)
    cands = _candidates(cm, builder)
    stats.candidates = len(cands)
    tasks = list(cm.tasks)
    nt = len(tasks)
    nodes = cm.topo.cluster.nodes
    nn = len(nodes)
    caps = [
        int(cm.opts.memory_utilization * cm.topo.cluster.gpu_types[n.gpu].memory_gb * 1e9 / MB) for n in nodes
    ]
    gen_i = tasks.index(GEN)
    train_i = tasks.index(ACTOR_TRAIN)
    vectors = sorted({c.vector for c in cands})
    by_task = {t: [i for i, c in enumerate(cands) if c.task == tasks[t]] for t in range(nt)}
    if any(not v for v in by_task.values()):
        return None, None, stats
    m = cp_model.CpModel()
    # group g is labelled by its first task (index g): task t may join groups g <= t only
    groups_of = {t: list(range(t + 1)) for t in range(nt)}
    if cm.wf.mode == "async":  # generation keeps a group of its own
        for t in range(nt):
            if t != gen_i:
                groups_of[t] = [g for g in groups_of[t] if g != gen_i]
    # w[g, v]: group g holds the GPUs of vector v; x[i, g]: candidate i runs in group g
    w = {(g, v): m.new_bool_var(f"w{g}_{vi}") for g in range(nt) for vi, v in enumerate(vectors)}
    x = {(i, g): m.new_bool_var(f"x{i}_{g}") for t in range(nt) for i in by_task[t] for g in groups_of[t]}
    for g in range(nt):
        m.add_at_most_one(w[g, v] for v in vectors)
    for t in range(nt):
        m.add_exactly_one(x[i, g] for i in by_task[t] for g in groups_of[t])
    for (i, g), xv in x.items():
        m.add_implication(xv, w[g, cands[i].vector])
    in_group = {
        (t, g): sum(x[i, g] for i in by_task[t]) for t in range(nt) for g in groups_of[t]
    }  # 0/1 expressions
    for g in range(nt):
        # group g exists iff its labelling task is in it; other tasks need it to exist
        m.add(
            sum(w[g, v] for v in vectors) == in_group[g, g]
            if (g, g) in in_group
            else sum(w[g, v] for v in vectors) == 0
        )
        for t in range(g + 1, nt):
            if (t, g) in in_group and (g, g) in in_group:
                m.add(in_group[t, g] <= in_group[g, g])
    for n in range(nn):  # groups are disjoint (C1, C2)
        m.add(sum(w[g, v] * v[n] for g in range(nt) for v in vectors if v[n]) <= nodes[n].count)
    # colocation of generation and actor training (generation is task 0, so its group is 0)
    co = in_group.get((train_i, gen_i), 0) if gen_i == 0 else 0
    for i in by_task[gen_i]:
        if cands[i].shared:
            for g in groups_of[gen_i]:
                if isinstance(co, int):
                    m.add(x[i, g] == 0)
                else:
                    m.add(x[i, g] <= co)
    # memory (C3) per group and node: Σ model memory + the working memory of any member
    for g in range(nt):
        members = [t for t in range(nt) if g in groups_of[t]]
        for n in range(nn):
            model = sum(
                x[i, g] * cands[i].mem_model[n] for t in members for i in by_task[t] if cands[i].mem_model[n]
            )
            for t in members:
                work = sum(x[i, g] * cands[i].mem_work[n] for i in by_task[t] if cands[i].mem_work[n])
                m.add(model + work <= caps[n])
    # stage times: per group the sum of its tasks, across groups the max (B.4 with Φ per group)
    cost = {i: round(c.choice.cost * SCALE) for i, c in enumerate(cands)}
    horizon = sum(max(cost[i] for i in by_task[t]) for t in range(nt)) + 1
    n_gpus = cm.topo.n

    def stage_time(members: list[int], name: str) -> cp_model.IntVar:
        p = m.new_int_var(0, horizon, name)
        for g in range(nt):
            terms = [x[i, g] * cost[i] for t in members if g in groups_of[t] for i in by_task[t]]
            if terms:
                m.add(p >= sum(terms))
        for t in members:  # valid cuts: a stage lasts at least as long as each of its tasks ...
            m.add(p >= sum(x[i, g] * cost[i] for g in groups_of[t] for i in by_task[t]))
        # ... and its GPU-seconds fit on the cluster: N·p ≥ Σ |v|·cost (groups are disjoint)
        m.add(
            n_gpus * p
            >= sum(
                x[i, g] * cost[i] * sum(cands[i].vector)
                for t in members
                for g in groups_of[t]
                for i in by_task[t]
            )
        )
        return p

    gen_time = sum(x[i, g] * cost[i] for i in by_task[gen_i] for g in groups_of[gen_i])
    p2 = stage_time([tasks.index(t) for t in INFERENCE_TASKS if t in tasks], "p2")
    p3 = stage_time([tasks.index(t) for t in TRAINING_TASKS if t in tasks], "p3")
    # weight transfer: resharding when colocated, else all-gather + broadcast + cheapest p2p pair
    shape = cm.shape(ACTOR_TRAIN)
    vol = B_BF16 * shape.layers * shape.params_per_layer
    train_uses = {
        n: sum(x[i, g] for i in by_task[train_i] for g in groups_of[train_i] if cands[i].vector[n])
        for n in range(nn)
    }
    gen_uses = {
        n: sum(x[i, g] for i in by_task[gen_i] for g in groups_of[gen_i] if cands[i].vector[n])
        for n in range(nn)
    }
    q = {(na, nb): m.new_bool_var(f"q{na}_{nb}") for na in range(nn) for nb in range(nn)}
    m.add(sum(q.values()) == 1 - co)
    for (na, nb), qv in q.items():
        m.add(qv <= train_uses[na])
        m.add(qv <= gen_uses[nb])
    p2p = sum(qv * round(cm.rings.min_pair([na], [nb], vol) * SCALE) for (na, nb), qv in q.items())
    colocated_train = sum(
        x[i, gen_i] * round(cands[i].reshard * SCALE) for i in by_task[train_i] if gen_i in groups_of[train_i]
    )
    apart_train = sum(
        x[i, g] * round(cands[i].allgather * SCALE)
        for i in by_task[train_i]
        for g in groups_of[train_i]
        if g != gen_i
    )
    bcast = sum(x[i, g] * round(cands[i].broadcast * SCALE) for i in by_task[gen_i] for g in groups_of[gen_i])
    big = max(round(c.broadcast * SCALE) for c in cands if c.task == GEN) + max(
        round(cm.rings.min_pair([na], [nb], vol) * SCALE) for na in range(nn) for nb in range(nn)
    )
    transfer = m.new_int_var(0, 10**9, "transfer")
    m.add(transfer >= colocated_train + apart_train)
    if isinstance(co, int):
        m.add(transfer >= colocated_train + apart_train + bcast + p2p)
    else:
        m.add(transfer >= colocated_train + apart_train + bcast + p2p - big * co)
    total = m.new_int_var(0, 10**9, "total")
    if cm.wf.mode == "sync":
        m.add(total >= gen_time + p2 + p3 + transfer)
    else:
        m.add(total >= gen_time + transfer)
        m.add(total >= p2 + p3 + transfer)
    m.minimize(total)
    stats.build_s = time.perf_counter() - t0
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(1.0, time_limit_s - stats.build_s)
    solver.parameters.num_workers = workers
    solver.parameters.linearization_level = 2
    t1 = time.perf_counter()
    status = solver.solve(m)
    stats.solve_s = time.perf_counter() - t1
    stats.status = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, stats
    stats.optimal = status == cp_model.OPTIMAL
    stats.objective_s = solver.objective_value / SCALE
    stats.bound_s = solver.best_objective_bound / SCALE
    # decode
    free = {n: [d for d in range(cm.topo.n) if cm.node[d] == n] for n in range(nn)}
    groups = []
    for g in range(nt):
        vec = next((v for v in vectors if solver.value(w[g, v])), None)
        if vec is None:
            continue
        chosen = [
            (tasks[t], cands[i])
            for t in range(nt)
            if g in groups_of[t]
            for i in by_task[t]
            if solver.value(x[i, g])
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
    plan = Plan(tuple(groups), "hetrl-ilp")
    ev = cm.evaluate(plan)
    return (
        plan.with_algorithm("hetrl-ilp", search_s=time.perf_counter() - t0, ilp_status=stats.status),
        ev,
        stats,
    )
