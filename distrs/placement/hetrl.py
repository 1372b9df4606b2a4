"""HetRL hybrid scheduler: nested successive halving over Levels 1-2, evolutionary search below.

Follows HetRL §3.4 and Algorithm 1:

* arms are task groupings (Level 1, ``TaskGrouping``, line 5) and, per task grouping, GPU
  groupings (Level 2, ``GPUGrouping``, line 7); an arm's loss is the lowest cost-model estimate
  among the plans generated for it (lines 3, 23-24);
* the outer loop (lines 14-16, 29-31) gives each surviving task grouping
  b_m = ⌊B / (|TG_m|·⌈log2 |TG|⌉)⌋, the inner loop (lines 18-20, 27) gives each surviving GPU
  grouping b_{m,n} = ⌊b_m / (|GG_n|·⌈log2 |GG_m|⌉)⌋ plan generations, and the worse half is
  dropped after each round (``BestHalf``); each Level-1 round keeps the best half of the GPU
  groupings of every surviving task grouping;
* each plan generation is one step of an evolutionary algorithm over Level-3 assignments
  (lines 21-22): random initial individuals, then an offspring by mutation — with probability
  ``p_upgrade`` the paper's mutation (replace a GPU of a training-task group with a
  higher-TFLOPS GPU from a group without training tasks), else a random cross-group swap —
  improved by swap-based local search on a locality score (same node/zone/region pairs); the
  improved phenotype is evaluated but not written back (Baldwinian learning), and it replaces the
  worst individual when it is better. Levels 4-5 come from ``space.GroupBuilder``.

The budget B is wall-clock seconds (§3.4); it is converted into a number of plan generations
from the measured cost of one generation, as Algorithm 1 counts budget in generations. Each arm
gets at least one generation per round, the search stops at the deadline whatever the round,
and any time left after the last round goes to the best arm's EA.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from distrs.placement.costmodel import INF, CostModel, Evaluation
from distrs.placement.plan import ACTOR_TRAIN, CRITIC_TRAIN, Plan
from distrs.placement.space import GroupBuilder, gpu_groupings, locality_order, task_groupings

TRAIN_TASKS = (ACTOR_TRAIN, CRITIC_TRAIN)


@dataclass
class SearchStats:
    arms_level1: int = 0
    arms_level2: int = 0
    generations: int = 0
    evaluations: int = 0
    rounds: int = 0
    search_s: float = 0.0
    history: list[tuple[float, float]] = field(default_factory=list)


def locality_score(cm: CostModel, groups: Sequence[Sequence[int]]) -> int:
    """Σ over pairs in a group of 3·[same node] + 2·[same zone] + 1·[same region]."""
    total = 0
    for g in groups:
        for key, w in ((cm.topo.node_of, 3), (cm.topo.zone_of, 2), (cm.topo.region_of, 1)):
            counts = Counter(int(key[d]) for d in g)
            total += w * sum(c * (c - 1) // 2 for c in counts.values())
    return total


def local_search(cm: CostModel, groups: list[list[int]], max_rounds: int = 64) -> list[list[int]]:
    """Greedy swap-based locality search with group sizes (and GPU types per group) fixed.

    Only swaps of GPUs of one type are considered, so the search improves locality without
    undoing the compute profile chosen by mutation.
    """
    topo = cm.topo
    keys = ((topo.node_of, 3), (topo.zone_of, 2), (topo.region_of, 1))
    groups = [list(g) for g in groups]
    counts = [[Counter(int(k[d]) for d in g) for k, _ in keys] for g in groups]

    def contrib(gi: int, d: int, removing: int | None = None, adding: int | None = None) -> int:
        total = 0
        for ki, (k, w) in enumerate(keys):
            c = counts[gi][ki][int(k[d])] - 1  # peers of d in group gi (d itself excluded)
            if removing is not None and int(k[removing]) == int(k[d]):
                c -= 1
            if adding is not None and int(k[adding]) == int(k[d]):
                c += 1
            total += w * c
        return total

    for _ in range(max_rounds):
        best_gain, best = 0, None
        for ga in range(len(groups)):
            for gb in range(ga + 1, len(groups)):
                for a in groups[ga]:
                    for b in groups[gb]:
                        if topo.type_of[a] != topo.type_of[b] or topo.node_of[a] == topo.node_of[b]:
                            continue
                        before = contrib(ga, a) + contrib(gb, b)
                        after = contrib(ga, b, removing=a) + contrib(gb, a, removing=b)
                        gain = after - before
                        if gain > best_gain:
                            best_gain, best = gain, (ga, gb, a, b)
        if best is None:
            break
        ga, gb, a, b = best
        groups[ga][groups[ga].index(a)] = b
        groups[gb][groups[gb].index(b)] = a
        for ki, (k, _) in enumerate(keys):
            counts[ga][ki][int(k[a])] -= 1
            counts[ga][ki][int(k[b])] += 1
            counts[gb][ki][int(k[b])] -= 1
            counts[gb][ki][int(k[a])] += 1
    return groups


class ArmEA:
    """Evolutionary search over Level-3 assignments for one (task grouping, GPU grouping) arm."""

    def __init__(
        self,
        cm: CostModel,
        builder: GroupBuilder,
        grouping: tuple[tuple[str, ...], ...],
        sizes: tuple[int, ...],
        devices: Sequence[int],
        rng: random.Random,
        population: int = 8,
        p_upgrade: float = 0.5,
    ) -> None:
        self.cm, self.builder, self.grouping, self.sizes = cm, builder, grouping, sizes
        self.devices = list(devices)
        self.rng = rng
        self.pop_size = population
        self.p_upgrade = p_upgrade
        self.population: list[tuple[float, list[list[int]]]] = []
        self.best_cost = INF
        self.best_plan: Plan | None = None
        self.best_eval: Evaluation | None = None
        self.train_groups = [i for i, g in enumerate(grouping) if any(t in TRAIN_TASKS for t in g)]

    def _split(self, order: Sequence[int]) -> list[list[int]]:
        out, pos = [], 0
        for s in self.sizes:
            out.append(list(order[pos : pos + s]))
            pos += s
        return out

    def _mutate(self, parent: list[list[int]]) -> list[list[int]]:
        child = [g[:] for g in parent]
        comp = self.cm.comp
        non_train = [i for i in range(len(child)) if i not in self.train_groups]
        if self.train_groups and non_train and self.rng.random() < self.p_upgrade:
            gi = self.rng.choice(self.train_groups)
            a = self.rng.choice(child[gi])
            pool = [(gj, b) for gj in non_train for b in child[gj] if comp[b] > comp[a]]
            if pool:
                gj, b = self.rng.choice(pool)
                child[gi][child[gi].index(a)] = b
                child[gj][child[gj].index(b)] = a
                return child
        if len(child) >= 2:
            gi, gj = self.rng.sample(range(len(child)), 2)
            a, b = self.rng.choice(child[gi]), self.rng.choice(child[gj])
            child[gi][child[gi].index(a)] = b
            child[gj][child[gj].index(b)] = a
        return child

    def _evaluate(self, genotype: list[list[int]]) -> float:
        phenotype = local_search(self.cm, genotype)
        plan = self.builder.build_plan(self.grouping, phenotype)
        if plan is None:
            return INF
        ev = self.cm.evaluate(plan)
        if ev.feasible and ev.total < self.best_cost:
            self.best_cost, self.best_plan, self.best_eval = ev.total, plan, ev
        return ev.total if ev.feasible else INF

    def _initial_blocks(self) -> list[list[list[int]]]:
        """Contiguous blocks of the locality order, handed to the groups in up to
        ``pop_size - 2`` different orders (all orders when there are few groups)."""
        order = locality_order(self.cm, self.devices)
        perms = list(itertools.islice(itertools.permutations(range(len(self.sizes))), 720))
        self.rng.shuffle(perms)
        perms = [tuple(range(len(self.sizes))), *[p for p in perms if list(p) != sorted(p)]][
            : max(1, self.pop_size - 2)
        ]
        out = []
        for perm in perms:
            blocks: list[list[int]] = [[] for _ in self.sizes]
            pos = 0
            for gi in perm:
                blocks[gi] = list(order[pos : pos + self.sizes[gi]])
                pos += self.sizes[gi]
            out.append(blocks)
        return out

    def step(self) -> int:
        """One call of the EA (Algorithm 1 line 22); returns the number of plans generated.

        The first call creates the structured part of the initial population at once, so an
        arm's first loss is the best over its group orders rather than one arbitrary order.
        """
        if not self.population:
            for genotype in self._initial_blocks():
                self.population.append((self._evaluate(genotype), genotype))
            return len(self.population)
        if len(self.population) < self.pop_size and len(self.grouping) > 1:
            order = self.devices[:]
            self.rng.shuffle(order)
            genotype = self._split(order)
            self.population.append((self._evaluate(genotype), genotype))
            return 1
        if len(self.grouping) == 1:
            return 0  # one group holding every GPU: Levels 2-3 have a single point
        i, j = self.rng.sample(range(len(self.population)), 2) if len(self.population) > 1 else (0, 0)
        parent = min(self.population[i], self.population[j], key=lambda x: x[0])[1]
        child = self._mutate(parent)
        cost = self._evaluate(child)
        worst = max(range(len(self.population)), key=lambda k: self.population[k][0])
        if cost < self.population[worst][0]:
            self.population[worst] = (cost, child)
        return 1


def _node_boundaries(cm: CostModel) -> list[int]:
    order = locality_order(cm, range(cm.topo.n))
    out = [0]
    for pos, (a, b) in enumerate(itertools.pairwise(order), start=1):
        if cm.node[a] != cm.node[b]:
            out.append(pos)
    out.append(cm.topo.n)
    return out


def _misalignment(sizes: Sequence[int], bounds: Sequence[int]) -> int:
    total, pos = 0, 0
    for s in sizes[:-1]:
        pos += s
        total += min(abs(pos - b) for b in bounds)
    return total


def _clog2(x: int) -> int:
    return max(1, math.ceil(math.log2(x))) if x > 1 else 1


def _best_half(items: list, loss) -> list:  # type: ignore[no-untyped-def]
    keep = max(1, math.ceil(len(items) / 2))
    return sorted(items, key=loss)[:keep]


def schedule(
    cm: CostModel,
    budget_s: float = 60.0,
    seed: int = 0,
    unit: int | None = None,
    max_gpu_groupings: int = 48,
    population: int = 8,
) -> tuple[Plan | None, Evaluation | None, SearchStats]:
    """Algorithm 1 of HetRL with a wall-clock budget (seconds)."""
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    rng = random.Random(seed)
    stats = SearchStats()
    builder = GroupBuilder(cm)
    devices = list(range(cm.topo.n))
    n = len(devices)
    if unit is None:
        unit = max(1, n // 16)
    tgs = task_groupings(cm.tasks, cm.wf.mode)  # line 5
    ggs: dict[int, list[tuple[int, ...]]] = {}
    for ti, tg in enumerate(tgs):  # lines 6-12
        options = gpu_groupings(n, len(tg), unit)
        if len(options) > max_gpu_groupings:
            options = rng.sample(options, max_gpu_groupings)
        ggs[ti] = options
    arms: dict[tuple[int, tuple[int, ...]], ArmEA] = {}
    stats.arms_level1 = len(tgs)
    stats.arms_level2 = sum(len(v) for v in ggs.values())

    def arm(ti: int, gg: tuple[int, ...]) -> ArmEA:
        key = (ti, gg)
        if key not in arms:
            arms[key] = ArmEA(cm, builder, tgs[ti], gg, devices, random.Random(rng.random()), population)
        return arms[key]

    def arm_loss(ti: int, gg: tuple[int, ...]) -> float:
        a = arms.get((ti, gg))
        return a.best_cost if a else INF

    def tg_loss(ti: int) -> float:
        return min((arm_loss(ti, gg) for gg in ggs[ti]), default=INF)

    # Calibrate the cost of one generation to turn seconds into a generation count.
    probe_t = time.perf_counter()
    probes = 0
    for ti in range(min(3, len(tgs))):
        if ggs[ti]:
            arm(ti, ggs[ti][0]).step()
            probes += 1
    per_gen = max(1e-4, (time.perf_counter() - probe_t) / max(1, probes))
    big_b = max(1, int((deadline - time.perf_counter()) / per_gen))
    best: ArmEA | None = None

    def record() -> None:
        nonlocal best
        for a in arms.values():
            if a.best_plan is not None and (best is None or a.best_cost < best.best_cost):
                best = a
        if best is not None:
            stats.history.append((time.perf_counter() - t0, best.best_cost))

    tg_alive = [ti for ti in range(len(tgs)) if ggs[ti]]
    log_tg = _clog2(len(tg_alive))
    # Keep the arm count within what the budget can evaluate at least once per round.
    per_tg = max(4, big_b // max(1, len(tg_alive) * log_tg * 2))
    bounds = _node_boundaries(cm)
    for ti in tg_alive:
        if len(ggs[ti]) > per_tg:
            # node-aligned GPU groupings first (every group boundary on a node boundary of the
            # locality order), the rest of the arms drawn at random
            ranked = sorted(ggs[ti], key=lambda g: (_misalignment(g, bounds), rng.random()))
            half = per_tg // 2
            ggs[ti] = ranked[:half] + rng.sample(ranked[half:], per_tg - half)
    stats.arms_level2 = sum(len(ggs[ti]) for ti in tg_alive)
    out_of_time = False
    for _m in range(log_tg):  # line 14
        stats.rounds += 1
        b_m = max(1, big_b // (len(tg_alive) * log_tg))  # line 16
        for ti in tg_alive:  # line 15
            gg_alive = list(ggs[ti])  # line 17
            log_gg = _clog2(len(ggs[ti]))
            for _n in range(log_gg):  # line 18
                b_mn = max(1, b_m // (len(gg_alive) * log_gg))  # line 20
                for gg in gg_alive:  # line 19
                    a = arm(ti, gg)
                    k = 0
                    while k < b_mn:  # lines 21-25
                        made = a.step()
                        k += max(1, made)
                        stats.generations += made
                        if time.perf_counter() > deadline:
                            out_of_time = True
                            break
                    if out_of_time:
                        break
                if out_of_time or len(gg_alive) == 1:
                    break
                gg_alive = _best_half(gg_alive, lambda g, ti=ti: arm_loss(ti, g))  # line 27
            ggs[ti] = _best_half(ggs[ti], lambda g, ti=ti: arm_loss(ti, g))  # line 29
            if out_of_time:
                break
        record()
        if out_of_time or len(tg_alive) == 1:
            break
        tg_alive = _best_half(tg_alive, tg_loss)  # line 31
    # Spend what is left of the budget on the best arm.
    if best is not None:
        while time.perf_counter() < deadline:
            before = best.best_cost
            stats.generations += best.step()
            if len(best.grouping) == 1:
                break
            if best.best_cost < before:
                record()
    record()
    stats.search_s = time.perf_counter() - t0
    stats.evaluations = cm.evaluations
    if best is None or best.best_plan is None:
        return None, None, stats
    plan = best.best_plan.with_algorithm("hetrl", search_s=stats.search_s)
    return plan, best.best_eval, stats
