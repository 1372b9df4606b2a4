"""The HetRL multi-level search space (§3.2) and the Level 4-5 plan builder shared by all searchers.

* Level 1 ``task_groupings``: set partitions of the tasks (Bell-number many); in async mode the
  generation task must be alone (it keeps its own model copy).
* Level 2 ``gpu_groupings``: group sizes, i.e. compositions of N into |tg| positive parts, in
  units of ``unit`` GPUs to keep the number of arms tractable on large clusters.
* Level 3 is a concrete GPU → group assignment (chosen by the searchers).
* Level 4 ``strategies``: every (DP, PP, TP) with DP·PP·TP = group size, TP a power of two
  within one node, PP ≤ layers. Every task in a group spans all of the group's GPUs.
* Level 5 ``layouts``: how tasklets l_{i,j,k} map onto the group's GPUs. GPUs are first put
  in locality order (region, zone, node, faster first); the *replica-major* layout keeps TP
  shards and then pipeline stages of a replica next to each other, the *stage-major* layout
  keeps the DP peers of a stage next to each other. ``GroupBuilder`` picks, per task, the
  layout and strategy of least cost (C^t) such that the group satisfies C3.

Because GPUs on one node are interchangeable in the cost model, the builder caches its choice
per (task, GPUs-per-node signature), which is what makes evolutionary search affordable.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from distrs.placement.costmodel import INF, CostModel
from distrs.placement.plan import ACTOR_TRAIN, GEN, Plan, Strategy, TaskGroup, TaskPlacement

LAYOUTS = ("replica-major", "stage-major")


def set_partitions(items: Sequence[str]) -> Iterator[list[tuple[str, ...]]]:
    """All set partitions of ``items`` (Level 1 has B_T of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for i in range(len(part)):
            yield [*part[:i], (first, *part[i]), *part[i + 1 :]]
        yield [(first,), *part]


def task_groupings(tasks: Sequence[str], mode: str) -> list[tuple[tuple[str, ...], ...]]:
    out = []
    for part in set_partitions(list(tasks)):
        groups = tuple(
            sorted(
                (tuple(sorted(g, key=list(tasks).index)) for g in part), key=lambda g: list(tasks).index(g[0])
            )
        )
        if mode == "async":
            gen_group = next(g for g in groups if GEN in g)
            if len(gen_group) != 1:
                continue
        out.append(groups)
    return out


def compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Ordered ways to write ``total`` as ``parts`` positive integers."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def gpu_groupings(n: int, parts: int, unit: int = 1) -> list[tuple[int, ...]]:
    """Level 2: GPU-group sizes (multiples of ``unit``, the remainder going to the last group)."""
    if parts > n:
        return []
    units = n // unit
    if units < parts:
        unit, units = 1, n
    out = []
    for comp in compositions(units, parts):
        sizes = [c * unit for c in comp]
        sizes[-1] += n - units * unit
        out.append(tuple(sizes))
    return out


MAX_PP = 8


def strategies(n: int, layers: int, max_tp: int, samples: int, max_pp: int = MAX_PP) -> list[Strategy]:
    out = []
    tp = 1
    while tp <= min(n, max_tp):
        if n % tp == 0:
            rest = n // tp
            for pp in range(1, rest + 1):
                if rest % pp == 0 and pp <= min(layers, max_pp):
                    dp = rest // pp
                    if dp <= samples:
                        out.append(Strategy(dp, pp, tp))
        tp *= 2
    return out


def locality_order(cm: CostModel, devices: Sequence[int]) -> list[int]:
    topo = cm.topo
    return sorted(
        devices,
        key=lambda d: (int(topo.region_of[d]), int(topo.zone_of[d]), int(topo.node_of[d]), -cm.comp[d], d),
    )


def layout(order: Sequence[int], s: Strategy, kind: str) -> tuple[int, ...]:
    """Map tasklet (i, j, k) to a GPU: ``devices[i*pp*tp + j*tp + k]``."""
    out = [0] * s.size
    pos = 0
    if kind == "replica-major":
        return tuple(order[: s.size])
    for j in range(s.pp):  # stage-major: DP peers of stage j, each with its TP shards, adjacent
        for i in range(s.dp):
            for k in range(s.tp):
                out[i * s.pp * s.tp + j * s.tp + k] = order[pos]
                pos += 1
    return tuple(out)


@dataclass(frozen=True)
class Choice:
    strategy: Strategy
    layout: str
    cost: float
    layers: tuple[int, ...]
    memory: float = 0.0
    """Largest per-GPU model + working memory of this choice alone (bytes)."""


class GroupBuilder:
    """Levels 4-5 for one task group on a given GPU set, with C3 enforced for the group."""

    def __init__(self, cm: CostModel, max_nodes: int = 20_000) -> None:
        self.cm = cm
        self.max_nodes = max_nodes
        self._choices: dict[tuple[str, tuple[tuple[int, int], ...], bool], list[Choice]] = {}
        self.max_tp = max(n.count for n in cm.topo.cluster.nodes)

    def signature(self, devices: Sequence[int]) -> tuple[tuple[int, int], ...]:
        return tuple(sorted(Counter(self.cm.node[d] for d in devices).items()))

    def ranked_choices(self, task: str, devices: Sequence[int], gen_shares_train: bool) -> list[Choice]:
        """Level 4 × Level 5 candidates for one task, cheapest first, each feasible alone."""
        key = (task, self.signature(devices), gen_shares_train)
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        cm = self.cm
        order = locality_order(cm, devices)
        shape = cm.shape(task)
        out: list[Choice] = []
        for s in strategies(len(devices), shape.layers, self.max_tp, cm.wf.samples):
            for kind in LAYOUTS if s.dp > 1 and s.pp * s.tp > 1 else LAYOUTS[:1]:
                p = TaskPlacement(task, s, layout(order, s, kind))
                try:
                    layers = cm.layer_split(p)
                except ValueError:
                    continue
                usage = cm.placement_memory(p, layers, gen_shares_train)
                ok, _, _ = cm.memory_fits([usage])
                if not ok:  # C3 for the task alone: cheap, so checked before the cost
                    continue
                tc = cm.task_cost(p)
                if tc.total != INF:
                    peak = max(m + w for m, w in usage.values())
                    out.append(Choice(s, kind, tc.total, tc.layers, peak))
        out.sort(key=lambda c: c.cost)
        self._choices[key] = out
        return out

    def build(self, tasks: Sequence[str], devices: Sequence[int], gen_shares_train: bool) -> TaskGroup | None:
        """Choices for the tasks of one group minimising Σ C^t (tasks of a group run one after
        another) subject to C3 on every GPU: a depth-first branch and bound over the per-task
        cost/memory Pareto fronts, with the sum of the cheapest remaining costs as bound."""
        cm = self.cm
        order = locality_order(cm, devices)
        fronts = [pareto(self.ranked_choices(t, devices, gen_shares_train)) for t in tasks]
        if any(not f for f in fronts):
            return None
        usages = [
            [
                cm.placement_memory(
                    TaskPlacement(t, c.strategy, layout(order, c.strategy, c.layout), c.layers),
                    c.layers,
                    gen_shares_train,
                )
                for c in f
            ]
            for t, f in zip(tasks, fronts, strict=True)
        ]
        n = len(tasks)
        tail = [0.0] * (n + 1)
        for i in range(n - 1, -1, -1):
            tail[i] = tail[i + 1] + fronts[i][0].cost
        caps = {d: cm.opts.memory_utilization * cm.mem[d] for d in devices}
        best_cost = INF
        best_pick: list[int] | None = None
        pick: list[int] = []
        nodes_left = [self.max_nodes]

        def dfs(i: int, cost: float, model: dict[int, float], work: dict[int, float]) -> None:
            nonlocal best_cost, best_pick
            if cost + tail[i] >= best_cost or nodes_left[0] <= 0:
                return
            nodes_left[0] -= 1
            if i == n:
                best_cost, best_pick = cost, pick[:]
                return
            for ci, ch in enumerate(fronts[i]):
                use = usages[i][ci]
                m2, w2 = dict(model), dict(work)
                ok = True
                for d, (mm, ww) in use.items():
                    m2[d] = m2.get(d, 0.0) + mm
                    w2[d] = max(w2.get(d, 0.0), ww)
                    if m2[d] + w2[d] > caps[d]:
                        ok = False
                        break
                if ok:
                    pick.append(ci)
                    dfs(i + 1, cost + ch.cost, m2, w2)
                    pick.pop()

        dfs(0, 0.0, {}, {})
        if best_pick is None:
            return None
        return self._combine(
            tasks, devices, order, [fronts[i][c] for i, c in enumerate(best_pick)], gen_shares_train
        )

    def _combine(
        self,
        tasks: Sequence[str],
        devices: Sequence[int],
        order: Sequence[int],
        choices: Sequence[Choice],
        gen_shares_train: bool,
    ) -> TaskGroup | None:
        cm = self.cm
        placements = []
        usage = []
        for t, ch in zip(tasks, choices, strict=True):
            p = TaskPlacement(t, ch.strategy, layout(order, ch.strategy, ch.layout), ch.layers)
            placements.append(p)
            usage.append(cm.placement_memory(p, ch.layers, gen_shares_train))
        if len(tasks) == 1 or cm.memory_fits(usage)[0]:
            return TaskGroup(tuple(tasks), tuple(devices), tuple(placements))
        return None

    def build_plan(
        self, grouping: Sequence[Sequence[str]], assignment: Sequence[Sequence[int]]
    ) -> Plan | None:
        shares = False
        if self.cm.wf.mode == "sync":
            shares = any(GEN in g and ACTOR_TRAIN in g for g in grouping)
        groups = []
        for tasks, devs in zip(grouping, assignment, strict=True):
            g = self.build(tasks, devs, shares and GEN in tasks)
            if g is None:
                return None
            groups.append(g)
        return Plan(tuple(groups))


def pareto(choices: Sequence[Choice]) -> list[Choice]:
    """Choices not dominated in (cost, per-GPU memory peak), cheapest first."""
    front: list[Choice] = []
    for c in sorted(choices, key=lambda c: (c.cost, c.memory)):
        if not front or c.memory < front[-1].memory:
            front.append(c)
    return front


def rank_vectors(lengths: Sequence[int], total: int) -> Iterator[tuple[int, ...]]:
    if not lengths:
        if total == 0:
            yield ()
        return
    for first in range(min(lengths[0] - 1, total) + 1):
        for rest in rank_vectors(lengths[1:], total - first):
            yield (first, *rest)
