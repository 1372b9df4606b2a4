"""SHA-EA, the ILP and the baselines against exhaustive search on a 4-GPU instance."""

from __future__ import annotations

import itertools

import pytest

from distrs.placement import baselines, hetrl, hetrl_ilp
from distrs.placement.costmodel import CostModel
from distrs.placement.space import GroupBuilder, task_groupings
from distrs.placement.topology import Topology
from tests.unit.placement.conftest import small_grpo


def brute_force(cm: CostModel) -> float:
    builder = GroupBuilder(cm)
    best = float("inf")
    n = cm.topo.n
    for grouping in task_groupings(cm.tasks, cm.wf.mode):
        k = len(grouping)
        for owner in itertools.product(range(k), repeat=n):
            if len(set(owner)) != k:
                continue
            assignment = [[d for d in range(n) if owner[d] == g] for g in range(k)]
            plan = builder.build_plan(grouping, assignment)
            if plan is None:
                continue
            ev = cm.evaluate(plan)
            if ev.feasible:
                best = min(best, ev.total)
    return best


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sha_ea_and_ilp_reach_the_brute_force_optimum(two_node_cluster, mode):
    cm = CostModel(Topology(two_node_cluster), small_grpo(mode))
    optimum = brute_force(cm)
    assert optimum < float("inf")
    _, ev, stats = hetrl.schedule(cm, budget_s=2.0, seed=1)
    assert ev is not None and ev.feasible
    assert ev.total == pytest.approx(optimum, rel=1e-9)
    assert stats.generations > 0
    plan, iev, istats = hetrl_ilp.schedule(cm, time_limit_s=600)  # a cap, not a performance bound
    assert istats.optimal
    assert iev is not None and iev.feasible
    # the ILP optimises the same space exactly (costs rounded to 1 ms)
    assert iev.total <= optimum + 2e-3
    assert iev.total == pytest.approx(istats.objective_s, abs=2e-3 * len(plan.groups) * 4)


def test_baselines_are_feasible_and_not_better_than_optimum(two_node_cluster):
    cm = CostModel(Topology(two_node_cluster), small_grpo("sync"))
    optimum = brute_force(cm)
    plan, ev = baselines.verl_baseline(cm)
    assert plan is not None and ev is not None and ev.feasible
    assert len(plan.groups) == 1  # every task colocated on every GPU
    assert ev.total >= optimum - 1e-9
    plan, ev = baselines.streamrl_baseline(cm)
    assert plan is not None and ev is not None
    assert len(plan.groups) == 2 and plan.groups[0].tasks == ("actor_gen",)
    types = {cm.topo.devices[d].gpu.name for d in plan.groups[0].devices}
    assert len(types) == 1  # StreamRL groups are homogeneous
    assert ev.total >= optimum - 1e-9
