"""Parts of the SHA-EA search (HetRL §3.4): the swap-based locality search, the fitness of an
individual (local search kept only when it lowers the cost) and the structured seeds, plus the
weight-synchronisation term they are tuned for (App. B.2 C_sync), worked out by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from distrs.placement.costmodel import CostModel, CostOptions
from distrs.placement.hetrl import ArmEA, local_search, locality_score
from distrs.placement.plan import ACTOR_TRAIN, GEN, REF_INF, Plan, Strategy, TaskGroup, TaskPlacement
from distrs.placement.space import GroupBuilder
from distrs.placement.topology import Topology
from tests.unit.placement.conftest import small_grpo, tiny_cluster


def two_regions(count: int) -> object:
    """Nodes n0 (region a) and n1 (region b) of ``count`` fast GPUs each, 10 ms / 8 Gbit/s apart."""
    return tiny_cluster(
        [
            {"name": "n0", "gpu": "fast", "count": count, "region": "a"},
            {"name": "n1", "gpu": "fast", "count": count, "region": "b"},
        ],
        [{"a": "a", "b": "b", "latency_ms": 10.0, "bandwidth_gbps": 8.0}],
    )


def best_swap_gain(cm: CostModel, groups: list[list[int]]) -> int:
    """Largest locality-score gain of one same-type, cross-node swap between two groups."""
    base = locality_score(cm, groups)
    best = 0
    for ga, gb in itertools.combinations(range(len(groups)), 2):
        for a in groups[ga]:
            for b in groups[gb]:
                if cm.topo.type_of[a] != cm.topo.type_of[b] or cm.node[a] == cm.node[b]:
                    continue
                swapped = [g[:] for g in groups]
                swapped[ga][swapped[ga].index(a)] = b
                swapped[gb][swapped[gb].index(b)] = a
                best = max(best, locality_score(cm, swapped) - base)
    return best


def test_local_search_applies_a_swap_whose_true_gain_is_small():
    # Each group holds 2 GPUs of each node; one swap (3 + 1 splits) raises the score by 12,
    # and the search must keep swapping until each group holds one whole node.
    cm = CostModel(Topology(two_regions(4)), small_grpo("async"))
    groups = [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert best_swap_gain(cm, groups) == 12  # 2 groups x (2 peers - 1 peer) x (3 + 2 + 1)
    out = local_search(cm, groups)
    assert sorted(map(sorted, out)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert locality_score(cm, out) > locality_score(cm, groups)


@pytest.mark.parametrize("seed", range(5))
def test_local_search_ends_in_a_local_optimum_of_the_score(seed):
    cm = CostModel(Topology(two_regions(4)), small_grpo("async"))
    devices = list(range(8))
    random.Random(seed).shuffle(devices)
    groups = [devices[:3], devices[3:]]
    out = local_search(cm, groups)
    assert [len(g) for g in out] == [3, 5]
    assert sorted(d for g in out for d in g) == list(range(8))
    assert best_swap_gain(cm, out) == 0


def test_weight_sync_p2p_is_intra_node_when_groups_share_a_node():
    """C_sync = min_i C_all-gather + max_i' C_broadcast + C_p2p (App. B.2): single-GPU
    replicas gather and broadcast nothing; the p2p term takes the closest pair of GPUs."""
    wf = small_grpo("async")
    cm = CostModel(Topology(two_regions(2)), wf, CostOptions(load_balance=False))
    volume = 2 * wf.model("actor").layers * wf.model("actor").params_per_layer  # B_BF16·nl·P
    dp2 = Strategy(2, 1, 1)

    def plan(gen: tuple[int, int], rest: tuple[int, int]) -> Plan:
        return Plan(
            (
                TaskGroup((GEN,), gen, (TaskPlacement(GEN, dp2, gen),)),
                TaskGroup(
                    (REF_INF, ACTOR_TRAIN),
                    rest,
                    (TaskPlacement(REF_INF, dp2, rest), TaskPlacement(ACTOR_TRAIN, dp2, rest)),
                ),
            )
        )

    shared = cm.evaluate(plan((1, 3), (0, 2)))  # GPUs 0 and 1 share node n0
    assert shared.feasible
    assert shared.weight_transfer == pytest.approx(5e-6 + volume / 100e9)
    apart = cm.evaluate(plan((2, 3), (0, 1)))  # one node each: the copy crosses regions
    assert apart.feasible
    assert apart.weight_transfer == pytest.approx(0.01 + volume / 1e9)


def arm_for(cm: CostModel, sizes: tuple[int, ...]) -> ArmEA:
    grouping = ((GEN,), (REF_INF, ACTOR_TRAIN))
    return ArmEA(cm, GroupBuilder(cm), grouping, sizes, range(cm.topo.n), random.Random(0))


def test_fitness_keeps_the_genotype_when_local_search_raises_the_cost():
    cm = CostModel(Topology(two_regions(2)), small_grpo("async"))
    arm = arm_for(cm, (2, 2))
    shared = [[1, 3], [0, 2]]  # generation and training share both nodes
    gathered = local_search(cm, shared)
    assert sorted(map(sorted, gathered)) == [[0, 1], [2, 3]]  # the score prefers whole nodes

    def cost(groups: list[list[int]]) -> float:
        plan = arm.builder.build_plan(arm.grouping, groups)
        assert plan is not None
        return cm.evaluate(plan).total

    assert cost(shared) < cost(gathered)  # the weight sync no longer crosses regions
    assert arm._evaluate(shared) == pytest.approx(min(cost(shared), cost(gathered)))
    assert arm.best_cost == pytest.approx(cost(shared))


def test_seeds_include_groups_split_inside_a_node():
    cm = CostModel(Topology(two_regions(4)), small_grpo("async"))
    group_order, node_order = arm_for(cm, (4, 4))._initial_blocks()
    seeds = group_order + node_order

    def nodes(group: list[int]) -> set[int]:
        return {cm.node[d] for d in group}

    assert any(nodes(s[0]) == nodes(s[1]) == {0, 1} for s in seeds)  # both groups on both nodes
    assert any(len(nodes(s[0])) == 1 for s in seeds)  # node-aligned seeds are kept
