"""The ILP's symmetry breaking, candidate bounds and pruning keep its optimum, and SHA-EA's
node-order seeding reaches plans that group-order seeding cannot."""

from __future__ import annotations

import random

import pytest
from ortools.sat.python import cp_model

from distrs.placement import hetrl, hetrl_ilp, hetrl_ilp_candidates
from distrs.placement.costmodel import CostModel
from distrs.placement.plan import CRITIC_INF, REF_INF, REWARD_INF
from distrs.placement.space import GroupBuilder
from distrs.placement.specs import parse_workflow
from distrs.placement.topology import Topology
from tests.unit.placement.conftest import tiny_cluster

SHAPE = {"layers": 8, "hidden": 1024, "intermediate": 4096}


def tiny_ppo():
    """PPO whose reward, reference and critic models share one shape (interchangeable tasks)."""
    return parse_workflow(
        {
            "algorithm": "ppo",
            "mode": "sync",
            "models": {"actor": SHAPE, "critic": SHAPE, "ref": SHAPE, "reward": SHAPE},
            "seq_in": 512,
            "seq_out": 512,
            "global_batch": 16,
            "responses_per_prompt": 4,
            "name": "tiny-ppo",
        }
    )


@pytest.fixture
def ppo_cm(two_node_cluster) -> CostModel:
    return CostModel(Topology(two_node_cluster), tiny_ppo())


def _optimum(model: hetrl_ilp.IlpModel) -> float:
    status, solver = hetrl_ilp.solve(model, 600)  # a cap, not a performance bound
    assert status == cp_model.OPTIMAL
    return solver.objective_value


def test_inference_tasks_of_one_shape_are_interchangeable(ppo_cm):
    classes = hetrl_ilp_candidates.interchangeable_tasks(ppo_cm)
    tasks = list(ppo_cm.tasks)
    assert classes == [[tasks.index(REWARD_INF), tasks.index(REF_INF), tasks.index(CRITIC_INF)]]


def test_strengthened_model_has_the_plain_models_optimum(ppo_cm):
    cands = hetrl_ilp_candidates.candidates(ppo_cm, GroupBuilder(ppo_cm))
    plain = _optimum(hetrl_ilp.build_model(ppo_cm, cands, strengthen=False))
    strong = _optimum(hetrl_ilp.build_model(ppo_cm, cands, strengthen=True))
    assert strong == plain


def test_candidate_bounds_hold_for_the_optimal_plan(ppo_cm):
    cands = hetrl_ilp_candidates.candidates(ppo_cm, GroupBuilder(ppo_cm))
    model = hetrl_ilp.build_model(ppo_cm, cands, strengthen=False)
    status, solver = hetrl_ilp.solve(model, 600)  # a cap, not a performance bound
    assert status == cp_model.OPTIMAL
    bounds = hetrl_ilp_candidates.candidate_bounds(ppo_cm, cands)
    chosen = [i for (i, _), var in model.x.items() if solver.value(var)]
    assert len(chosen) == len(ppo_cm.tasks)
    assert all(bounds.total[i] <= solver.objective_value for i in chosen)
    kept = set(hetrl_ilp_candidates.prune(ppo_cm, cands, round(solver.objective_value)))
    assert all(cands[i] in kept for i in chosen)


def test_warm_started_schedule_is_optimal(ppo_cm):
    cands = hetrl_ilp_candidates.candidates(ppo_cm, GroupBuilder(ppo_cm))
    plain = _optimum(hetrl_ilp.build_model(ppo_cm, cands, strengthen=False))
    # time_limit_s is a cap that keeps a broken build from hanging, not a performance bound
    # (that is benchmarks/): optimality must not depend on how loaded the machine is
    plan, ev, stats = hetrl_ilp.schedule(ppo_cm, time_limit_s=600, warm_start_s=1.0)
    assert stats.optimal and plan is not None and ev is not None and ev.feasible
    assert round(stats.objective_s * hetrl_ilp_candidates.SCALE) == plain


def test_downward_min_is_the_minimum_over_smaller_vectors():
    table = {(1, 0): 5, (0, 1): 7, (1, 1): 3, (2, 1): 9}
    out = hetrl_ilp_candidates.downward_min(table, [2, 1])
    assert out[(0, 0)] > 10**9
    assert out[(1, 0)] == 5 and out[(2, 0)] == 5
    assert out[(0, 1)] == 7 and out[(1, 1)] == 3 and out[(2, 1)] == 3


def _three_node_arm() -> tuple[CostModel, hetrl.ArmEA]:
    """A fast node and two slow ones; generation alone in a 4-GPU group, the rest in 2."""
    cluster = tiny_cluster(
        [
            {"name": "n0", "gpu": "fast", "count": 2, "region": "a"},
            {"name": "n1", "gpu": "slow", "count": 2, "region": "a"},
            {"name": "n2", "gpu": "slow", "count": 2, "region": "a"},
        ]
    )
    cm = CostModel(Topology(cluster), tiny_ppo())
    grouping = (("actor_gen",), tuple(t for t in cm.tasks if t != "actor_gen"))
    return cm, hetrl.ArmEA(cm, GroupBuilder(cm), grouping, (4, 2), range(cm.topo.n), random.Random(0))


def test_node_order_seeding_reaches_non_adjacent_node_groups():
    cm, arm = _three_node_arm()
    group_order, node_order = arm._initial_blocks()

    def sig(blocks: list[list[int]]) -> tuple[frozenset[int], ...]:
        return tuple(frozenset(cm.node[d] for d in g) for g in blocks)

    assert sig(group_order[0]) == (frozenset({0, 1}), frozenset({2}))  # identity orders first
    assert (frozenset({0, 2}), frozenset({1})) in {sig(b) for b in node_order}


def test_node_order_seeds_cost_one_generation_each():
    """Group orders are evaluated at an arm's first step, node orders one per later step, so
    seeding is paid for out of the arm's successive-halving budget."""
    _, arm = _three_node_arm()
    group_order, node_order = arm._initial_blocks()
    assert arm.step() == len(group_order)
    assert arm.seeds is not None and len(arm.seeds) == len(node_order)
    for left in range(len(node_order) - 1, -1, -1):
        assert arm.step() == 1
        assert len(arm.seeds) == left
    assert len(arm.population) <= arm.pop_size - 2
