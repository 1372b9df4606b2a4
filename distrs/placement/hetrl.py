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
  (lines 21-22): initial individuals seeded from blocks of the nodes (nodes and groups each
  taken in several orders, each sequence both node-aligned and rotated by half a node so that
  neighbouring groups share a node, ``ArmEA._initial_blocks``; the group orders at an arm's
  first generation, the node orders one per generation after it, so seeding is paid for out of
  the arm's own budget) plus random ones, then an offspring by mutation — with probability
  ``p_upgrade`` the paper's mutation (replace a GPU of a training-task group with a
  higher-TFLOPS GPU from a group without training tasks), else a random cross-group swap —
  improved by swap-based local search on a locality score (same node/zone/region pairs); the
  improved phenotype is evaluated but not written back (Baldwinian learning), an individual's
  fitness is the cost of the phenotype or of the genotype itself when the swaps did not lower
  it, and it replaces the worst individual when it is better. Levels 4-5 come from
  ``space.GroupBuilder``.

The budget B is wall-clock seconds (§3.4); it is converted into a number of plan generations
from the measured cost of one generation, as Algorithm 1 counts budget in generations, and
re-measured at each Level-1 round (what is left, split over the rounds left), since the first
generations are cache misses and overstate the cost. Each arm
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

Genotype = list[list[int]]  # Level 3: the GPUs of each group


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

    HetRL §3.4: repeatedly apply the cross-group GPU swap with the largest positive gain in a
    locality score (``locality_score``: machine-, zone- and region-level affinities), until no
    swap improves it. Only swaps of GPUs of one type are considered, so the search improves
    locality without undoing the compute profile chosen by mutation.
    """
    topo = cm.topo
    keys = ((topo.node_of, 3), (topo.zone_of, 2), (topo.region_of, 1))
    groups = [list(g) for g in groups]
    counts = [[Counter(int(k[d]) for d in g) for k, _ in keys] for g in groups]

    def peers(gi: int, d: int, member: bool, leaving: int | None = None) -> int:
        """Weighted count of the GPUs of group gi sharing a node/zone/region with d; d itself
        is excluded when it is a ``member`` of gi, and so is ``leaving`` (swapped out)."""
        total = 0
        for ki, (k, w) in enumerate(keys):
            c = counts[gi][ki][int(k[d])] - (1 if member else 0)
            if leaving is not None and int(k[leaving]) == int(k[d]):
                c -= 1
            total += w * c
        return total

    for _ in range(max_rounds):
        best_gain, best = 0, None
        # GPUs of one node are interchangeable (same type, zone and region), so one
        # representative per (group, node) gives every distinct swap, in the same order
        reps = [list({int(topo.node_of[d]): d for d in g[::-1]}.values()) for g in groups]
        reps = [sorted(r, key=g.index) for r, g in zip(reps, groups, strict=True)]
        for ga in range(len(groups)):
            for gb in range(ga + 1, len(groups)):
                for a in reps[ga]:
                    for b in reps[gb]:
                        if topo.type_of[a] != topo.type_of[b] or topo.node_of[a] == topo.node_of[b]:
                            continue
                        before = peers(ga, a, True) + peers(gb, b, True)
                        after = peers(ga, b, False, leaving=a) + peers(gb, a, False, leaving=b)
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
        self.seeds: list[Genotype] | None = None  # structured genotypes not yet evaluated
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

    def _cost(self, groups: Sequence[Sequence[int]]) -> float:
        """Cost-model estimate of one Level-3 assignment (Levels 4-5 from the builder)."""
        plan = self.builder.build_plan(self.grouping, groups)
        if plan is None:
            return INF
        ev = self.cm.evaluate(plan)
        if ev.feasible and ev.total < self.best_cost:
            self.best_cost, self.best_plan, self.best_eval = ev.total, plan, ev
        return ev.total if ev.feasible else INF

    def _signature(self, groups: Sequence[Sequence[int]]) -> tuple[tuple[tuple[int, int], ...], ...]:
        return tuple(self.builder.signature(g) for g in groups)

    def _evaluate(self, genotype: Genotype) -> float:
        """Fitness of an individual o: the cost of o* = swap-based local search on o, or of o
        itself when o* is not cheaper. §3.4 runs the swaps "to find a new individual o* that
        leads to lower cost"; the locality score is only a proxy for the cost, and it misjudges
        one pattern that matters across regions: a node shared by the generation group and
        the actor-training group makes the weight synchronisation's C_p2p (App. B.2) an
        intra-node copy, while gathering that node into one group raises the locality score
        and moves C_p2p onto an inter-region link. The phenotype is still not written back
        (Baldwinian learning)."""
        phenotype = local_search(self.cm, genotype)
        cost = self._cost(phenotype)
        if self._signature(phenotype) != self._signature(genotype):
            cost = min(cost, self._cost(genotype))
        return cost

    def _initial_blocks(self) -> tuple[list[Genotype], list[Genotype]]:
        """Structured initial individuals: the nodes (each a contiguous run of the locality
        order) are put in some order and the groups, in some order, take consecutive blocks of
        that sequence. Returns the group-order seeds (locality order, groups permuted; identity
        first) and the node-order seeds (nodes and groups permuted), distinct by the
        GPUs-per-node signature, at most ``4 · pop_size`` in all. Node orders matter on
        heterogeneous clusters: with nodes A, B, C a two-group plan {A, C} + {B} is reachable
        only from the order A C B, and random swaps seldom move a whole node.

        Each sequence is also used rotated by half of its first node, so that the group
        boundaries fall inside nodes: neighbouring groups then share a node. That matters for
        the generation and actor-training groups, whose weight synchronisation pays C_p2p
        (App. B.2) over the closest pair of their GPUs, an intra-node copy if they share a
        node and an inter-region transfer otherwise when every node is its own region; the
        locality search never creates such a split and mutations seldom reach one whose
        generation replicas still fit inside nodes."""
        order = locality_order(self.cm, self.devices)
        runs: list[list[int]] = []
        for d in order:
            if runs and self.cm.node[runs[-1][-1]] == self.cm.node[d]:
                runs[-1].append(d)
            else:
                runs.append([d])
        k = len(self.sizes)
        group_perms = list(itertools.islice(itertools.permutations(range(k)), 720))
        node_perms = list(itertools.islice(itertools.permutations(range(len(runs))), 720))
        self.rng.shuffle(group_perms)
        self.rng.shuffle(node_perms)
        identity_g, identity_n = tuple(range(k)), tuple(range(len(runs)))
        pairs = [(identity_n, identity_g)]
        pairs += [(identity_n, g) for g in group_perms if g != identity_g]
        pairs += [(n, g) for n in node_perms if n != identity_n for g in group_perms[:4]]
        group_order: list[Genotype] = []
        node_order: list[Genotype] = []
        seen: set[tuple[tuple[tuple[int, int], ...], ...]] = set()
        for node_perm, group_perm in pairs:
            aligned = [d for r in node_perm for d in runs[r]]
            half = len(runs[node_perm[0]]) // 2
            for seq in (aligned, aligned[half:] + aligned[:half]) if half else (aligned,):
                blocks: Genotype = [[] for _ in self.sizes]
                pos = 0
                for gi in group_perm:
                    blocks[gi] = seq[pos : pos + self.sizes[gi]]
                    pos += self.sizes[gi]
                sig = tuple(tuple(sorted(Counter(self.cm.node[d] for d in b).items())) for b in blocks)
                if sig not in seen:
                    seen.add(sig)
                    (group_order if node_perm == identity_n else node_order).append(blocks)
            if len(group_order) + len(node_order) >= 4 * self.pop_size:
                break
        return group_order, node_order

    def _admit(self, cost: float, genotype: Genotype, slots: int) -> None:
        """Add an individual while fewer than ``slots`` are held, else replace the worst one
        if the newcomer is better."""
        if len(self.population) < slots:
            self.population.append((cost, genotype))
            return
        worst = max(range(len(self.population)), key=lambda k: self.population[k][0])
        if cost < self.population[worst][0]:
            self.population[worst] = (cost, genotype)

    def step(self) -> int:
        """One call of the EA (Algorithm 1 line 22); returns the number of plans generated
        (0 when the arm has a single point).

        The first call evaluates the group-order seeds at once (at most ``pop_size - 2``), so
        an arm's first loss is the best over its group orders rather than one arbitrary order.
        The node-order seeds cost as many evaluations again per arm, more than the budget
        affords for the hundreds of 64-GPU arms in the first round, so they are evaluated
        lazily, one per later call, like any other plan generation: survivors of successive
        halving get them, and on ≤ 24 GPUs every arm does. Seeds compete for the
        ``pop_size - 2`` structured slots; random individuals fill the rest, then offspring
        are bred.
        """
        seed_slots = max(1, self.pop_size - 2)
        if self.seeds is None:
            group_order, node_order = self._initial_blocks()
            eager = group_order[:seed_slots]
            self.seeds = (group_order[seed_slots:] + node_order)[::-1]  # popped from the end
            for genotype in eager:
                self._admit(self._evaluate(genotype), genotype, seed_slots)
            return len(eager)
        if self.seeds:
            genotype = self.seeds.pop()
            self._admit(self._evaluate(genotype), genotype, seed_slots)
            return 1
        if len(self.grouping) == 1:
            return 0  # one group holding every GPU: Levels 2-3 have a single point
        if len(self.population) < self.pop_size:
            order = self.devices[:]
            self.rng.shuffle(order)
            genotype = self._split(order)
            self.population.append((self._evaluate(genotype), genotype))
            return 1
        i, j = self.rng.sample(range(len(self.population)), 2) if len(self.population) > 1 else (0, 0)
        parent = min(self.population[i], self.population[j], key=lambda x: x[0])[1]
        child = self._mutate(parent)
        self._admit(self._evaluate(child), child, self.pop_size)
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


def _generations_left(since: float, deadline: float, generations: int) -> int:
    """Plan generations that fit before ``deadline`` at the mean cost measured since ``since``."""
    now = time.perf_counter()
    per_gen = max(1e-4, (now - since) / max(1, generations))
    return max(1, int((deadline - now) / per_gen))


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
    for ti in range(min(3, len(tgs))):
        if ggs[ti]:
            stats.generations += arm(ti, ggs[ti][0]).step()
    big_b = _generations_left(probe_t, deadline, stats.generations)
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
    for m in range(log_tg):  # line 14
        stats.rounds += 1
        # line 16, b_m = ⌊B / (|TG_m|·⌈log2 |TG|⌉)⌋, with B re-measured each round as what is
        # left split over the rounds left (equal to B / ⌈log2 |TG|⌉ per round when the first
        # measurement is exact; early probes are slow cache misses, so it is not)
        b_left = _generations_left(probe_t, deadline, stats.generations)
        b_m = max(1, b_left // (len(tg_alive) * (log_tg - m)))
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
