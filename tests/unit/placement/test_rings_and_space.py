"""Ring min-max against brute force, and the size of each level of the search space."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from distrs.placement.plan import ACTOR_TRAIN, CRITIC_INF, CRITIC_TRAIN, GEN, REF_INF, REWARD_INF, Strategy
from distrs.placement.rings import RingCoster, ring_exact
from distrs.placement.space import (
    compositions,
    gpu_groupings,
    layout,
    pareto,
    set_partitions,
    strategies,
    task_groupings,
)


def brute_ring(nodes, alpha, beta, vol):
    first, rest = nodes[0], nodes[1:]
    best = math.inf
    for perm in itertools.permutations(rest):
        order = (first, *perm)
        worst = max(
            alpha[order[i]][order[(i + 1) % len(order)]] + vol / beta[order[i]][order[(i + 1) % len(order)]]
            for i in range(len(order))
        )
        best = min(best, worst)
    return best


def random_matrices(k, rng):
    alpha = [[0.0] * k for _ in range(k)]
    beta = [[0.0] * k for _ in range(k)]
    for a in range(k):
        for b in range(a, k):
            alpha[a][b] = alpha[b][a] = 1e-5 if a == b else rng.uniform(1e-3, 5e-2)
            beta[a][b] = beta[b][a] = 1e11 if a == b else rng.uniform(1e8, 1e10)
    return alpha, beta


@pytest.mark.parametrize("seed", range(8))
def test_exact_ring_matches_brute_force(seed):
    rng = random.Random(seed)
    alpha, beta = random_matrices(4, rng)
    nodes = [rng.randrange(4) for _ in range(rng.randint(3, 6))]
    assert ring_exact(nodes, alpha, beta, 1e6) == pytest.approx(brute_ring(nodes, alpha, beta, 1e6))


@pytest.mark.parametrize("seed", range(6))
def test_large_ring_is_feasible_and_not_below_exact(seed):
    """For > 7 devices the heuristic ring is a real ring (≥ exact optimum) and is exact when the
    bottleneck spanning tree can be walked."""
    rng = random.Random(100 + seed)
    alpha, beta = random_matrices(3, rng)
    nodes = sorted(rng.randrange(3) for _ in range(8))
    coster = RingCoster(alpha, beta, [0, 1, 2])
    exact = ring_exact(nodes, alpha, beta, 1e6)
    approx = coster(nodes, 1e6)
    assert approx >= exact - 1e-12
    # with every node holding ≥ 2 devices the tree walk is feasible, hence exact
    if all(nodes.count(n) >= 2 for n in set(nodes)):
        assert approx == pytest.approx(exact)


def test_ring_of_one_node_is_intra_edge():
    coster = RingCoster([[1e-5, 1.0], [1.0, 1e-5]], [[1e11, 1e9], [1e9, 1e11]], [0, 1])
    assert coster([0] * 8, 1e9) == pytest.approx(1e-5 + 1e9 / 1e11)
    assert coster([0], 1e9) == 0.0
    assert coster([0, 1], 1e9) == pytest.approx(1.0 + 1.0)


@pytest.mark.parametrize(("n", "bell"), [(1, 1), (3, 5), (4, 15), (6, 203)])
def test_level1_is_bell_number(n, bell):
    items = [str(i) for i in range(n)]
    parts = list(set_partitions(items))
    assert len(parts) == bell
    assert len({tuple(sorted(tuple(sorted(g)) for g in p)) for p in parts}) == bell


def test_async_groupings_keep_generation_alone():
    tasks = (GEN, REWARD_INF, REF_INF, CRITIC_INF, ACTOR_TRAIN, CRITIC_TRAIN)
    groupings = task_groupings(tasks, "async")
    assert len(groupings) == 52  # Bell(5): the other five tasks partitioned freely
    assert all((GEN,) in g for g in groupings)


@pytest.mark.parametrize(("n", "t"), [(8, 1), (8, 3), (16, 4)])
def test_level2_counts(n, t):
    assert len(list(compositions(n, t))) == math.comb(n - 1, t - 1)
    assert all(sum(s) == n for s in gpu_groupings(n, t))


def test_gpu_groupings_in_units_cover_remainder():
    sizes = gpu_groupings(10, 2, unit=4)
    assert sizes == [(4, 6)]


def test_level4_strategies_fill_the_group():
    got = strategies(8, layers=4, max_tp=4, samples=100)
    assert all(s.size == 8 and s.tp <= 4 and s.pp <= 4 for s in got)
    assert Strategy(1, 2, 4) in got and Strategy(8, 1, 1) in got and Strategy(1, 8, 1) not in got


def test_layouts():
    s = Strategy(2, 2, 1)
    order = [10, 11, 12, 13]
    assert layout(order, s, "replica-major") == (10, 11, 12, 13)
    # stage-major: DP peers of a stage adjacent: (i=0,j=0)=10, (i=1,j=0)=11, (i=0,j=1)=12, (i=1,j=1)=13
    assert layout(order, s, "stage-major") == (10, 12, 11, 13)


def test_pareto_front():
    from distrs.placement.space import Choice

    cs = [Choice(Strategy(1, 1, 1), "replica-major", c, (), m) for c, m in [(1, 10), (2, 5), (3, 7), (4, 1)]]
    assert [c.cost for c in pareto(cs)] == [1, 2, 4]
