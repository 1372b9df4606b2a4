"""Task-level (B.3) and end-to-end (B.4) costs of tiny plans, worked out by hand.

Cluster (conftest): node n0 = GPUs 0,1 (100 TFLOPS, 1000 GB/s HBM), node n1 = GPUs 2,3
(50 TFLOPS, 500 GB/s); inside a node α = 5 µs, β = 100 GB/s; between nodes α = 10 ms,
β = 8 Gbit/s = 1 GB/s. Model: 2 layers, h1 = 4, h2 = 8 (160 params/layer); 4 samples of
2 + 2 tokens; micro-batch 1 for training, 2 for inference and generation.
"""

from __future__ import annotations

import pytest

from distrs.placement.costmodel import CostModel, CostOptions
from distrs.placement.plan import ACTOR_TRAIN, GEN, REF_INF, Plan, Strategy, TaskGroup, TaskPlacement
from distrs.placement.topology import Topology

OPTS = CostOptions(train_micro_batch=1, infer_micro_batch=2, load_balance=False)
INTRA_A, INTRA_B = 5e-6, 100e9
INTER_A, INTER_B = 0.01, 1e9


def intra(vol: float) -> float:
    return INTRA_A + vol / INTRA_B


def model(cluster, wf) -> CostModel:
    return CostModel(Topology(cluster), wf, OPTS)


def tp2(task: str, devices: tuple[int, int]) -> TaskPlacement:
    return TaskPlacement(task, Strategy(1, 1, 2), devices)


# hand values for one task at TP=2 on the fast node (0, 1)
TRAIN_TP2 = 3 * 4 * 1 * 2 * 1536 / (100e12 * 2) + 6 * 4 * 2 * intra(32)  # comp + C_tp (nm=4, mbs=1)
REF_TP2 = 2 * 2 * 2 * 1536 / (100e12 * 2) + 2 * 2 * 2 * intra(64)  # nm=2, mbs=2
GEN_TP2 = 2 * 2 * 2 * 704 / (100e12 * 2) + 2 * 2 * 2 * intra(64) + 2 * 2 * 2 * 2 * 2 * 160 / (4 * 1000e9 * 2)
RESHARD_TP2 = intra(2 * 2 * 160 / 2)


def all_tasks_tp2_on_first_node() -> TaskGroup:
    """GRPO's three tasks colocated on GPUs 0-1, each with TP 2."""
    return TaskGroup(
        (GEN, REF_INF, ACTOR_TRAIN),
        (0, 1),
        (tp2(GEN, (0, 1)), tp2(REF_INF, (0, 1)), tp2(ACTOR_TRAIN, (0, 1))),
    )


def test_topology_matrices(two_node_cluster):
    topo = Topology(two_node_cluster)
    assert topo.n == 4
    assert topo.alpha[0, 1] == pytest.approx(INTRA_A)
    assert topo.beta[0, 1] == pytest.approx(INTRA_B)
    assert topo.alpha[1, 2] == pytest.approx(INTER_A)
    assert topo.beta[1, 2] == pytest.approx(INTER_B)
    assert topo.edge_cost(0, 3, 1e9) == pytest.approx(INTER_A + 1.0)


def test_task_costs_by_hand(two_node_cluster, tiny_grpo):
    cm = model(two_node_cluster, tiny_grpo)
    assert cm.task_cost(tp2(ACTOR_TRAIN, (0, 1))).total == pytest.approx(TRAIN_TP2)
    assert cm.task_cost(tp2(REF_INF, (0, 1))).total == pytest.approx(REF_TP2)
    assert cm.task_cost(tp2(GEN, (0, 1))).total == pytest.approx(GEN_TP2)


def test_dp_allreduce_crosses_nodes(two_node_cluster, tiny_grpo):
    cm = model(two_node_cluster, tiny_grpo)
    tc = cm.task_cost(TaskPlacement(ACTOR_TRAIN, Strategy(2, 1, 1), (0, 2), samples=(2, 2)))
    # C_dp = α + cv_dp/β with cv_dp = 2·2·160·2·1/2 = 640 bytes over the inter-node link
    assert tc.dp == pytest.approx(INTER_A + 640 / INTER_B)
    # the slow replica (GPU 2, 50 TFLOPS) bounds Ψ^train: 3·nm·mbs·nl·C/comp with nm = 2
    assert tc.total == pytest.approx(3 * 2 * 1 * 2 * 1536 / 50e12 + INTER_A + 640 / INTER_B)


def test_pipeline_cost_and_bubble(two_node_cluster, tiny_grpo):
    cm = model(two_node_cluster, tiny_grpo)
    tc = cm.task_cost(TaskPlacement(ACTOR_TRAIN, Strategy(1, 2, 1), (0, 2), layers=(1, 1)))
    comp0 = 3 * 4 * 1 * 1 * 1536 / 100e12
    comp1 = 3 * 4 * 1 * 1 * 1536 / 50e12
    c_pp = 2 * 4 * (INTER_A + 2 * 1 * 4 * 4 / INTER_B)  # 2·nm·(α + cv_pp/β), cv_pp = 32 bytes
    stage0 = comp0 + c_pp
    stage1 = comp1
    expected = max(stage0, stage1) + stage1 / 4  # + C_bubble = Σ_{j≠0} (...)/nm
    assert tc.pp == pytest.approx(c_pp)
    assert tc.total == pytest.approx(expected)


def test_sync_grpo_colocated_is_sum_plus_reshard(two_node_cluster, tiny_grpo):
    cm = model(two_node_cluster, tiny_grpo)
    group = all_tasks_tp2_on_first_node()
    ev = cm.evaluate(Plan((group,)))
    assert ev.feasible
    # C_SyncGRPO = C^1 + Φ({C^3}) + C^5 + C_reshard (B.4)
    assert ev.weight_transfer == pytest.approx(RESHARD_TP2)
    assert ev.total == pytest.approx(GEN_TP2 + REF_TP2 + TRAIN_TP2 + RESHARD_TP2)
    assert ev.throughput(tiny_grpo) == pytest.approx(4 * 4 / ev.total)


def test_async_grpo_overlaps_generation_and_pays_weight_sync(two_node_cluster, tiny_grpo):
    wf = tiny_grpo.__class__(**{**tiny_grpo.__dict__, "mode": "async"})
    cm = model(two_node_cluster, wf)
    gen = tp2(GEN, (2, 3))
    rest = TaskGroup((REF_INF, ACTOR_TRAIN), (0, 1), (tp2(REF_INF, (0, 1)), tp2(ACTOR_TRAIN, (0, 1))))
    ev = cm.evaluate(Plan((TaskGroup((GEN,), (2, 3), (gen,)), rest)))
    assert ev.feasible
    gen_cost = (
        2 * 2 * 2 * 704 / (50e12 * 2) + 2 * 2 * 2 * intra(64) + 2 * 2 * 2 * 2 * 2 * 160 / (4 * 500e9 * 2)
    )
    assert ev.tasks[GEN].total == pytest.approx(gen_cost)
    # C_sync = min_i all-gather(train) + max_i' broadcast(gen) + min p2p (α + B·nl·P/β)
    sync = intra(320) + intra(320) + INTER_A + 2 * 2 * 160 / INTER_B
    assert ev.weight_transfer == pytest.approx(sync)
    assert ev.total == pytest.approx(max(gen_cost, REF_TP2 + TRAIN_TP2) + sync)


def test_async_requires_generation_alone(two_node_cluster, tiny_grpo):
    wf = tiny_grpo.__class__(**{**tiny_grpo.__dict__, "mode": "async"})
    cm = model(two_node_cluster, wf)
    group = all_tasks_tp2_on_first_node()
    ev = cm.evaluate(Plan((group,)))
    assert not ev.feasible
    assert "own task group" in ev.reason


def test_tasks_in_different_groups_overlap(two_node_cluster, tiny_grpo):
    """Φ per group: inference in one group overlaps nothing else in stage 2, so stage 2 = C_ref."""
    cm = model(two_node_cluster, tiny_grpo)
    plan = Plan(
        (
            TaskGroup((GEN, ACTOR_TRAIN), (0, 1), (tp2(GEN, (0, 1)), tp2(ACTOR_TRAIN, (0, 1)))),
            TaskGroup((REF_INF,), (2, 3), (tp2(REF_INF, (2, 3)),)),
        )
    )
    ev = cm.evaluate(plan)
    ref_slow = 2 * 2 * 2 * 1536 / (50e12 * 2) + 2 * 2 * 2 * intra(64)
    assert ev.tasks[REF_INF].total == pytest.approx(ref_slow)
    assert ev.total == pytest.approx(GEN_TP2 + ref_slow + TRAIN_TP2 + RESHARD_TP2)


def test_memory_constraint_c3(two_node_cluster, tiny_grpo):
    big = tiny_grpo.__class__(
        **{
            **tiny_grpo.__dict__,
            "models": {
                "actor": tiny_grpo.models["actor"].__class__(layers=80, hidden=8192, intermediate=28672)
            },
        }
    )
    cm = model(two_node_cluster, big)
    group = all_tasks_tp2_on_first_node()
    ev = cm.evaluate(Plan((group,)))
    assert not ev.feasible
    assert "GB" in ev.reason


def test_plan_must_cover_every_task_once(two_node_cluster, tiny_grpo):
    cm = model(two_node_cluster, tiny_grpo)
    ev = cm.evaluate(Plan((TaskGroup((GEN,), (0, 1), (tp2(GEN, (0, 1)),)),)))
    assert not ev.feasible


def test_load_balancing_gives_fast_replica_more_samples(two_node_cluster, tiny_grpo):
    wf = tiny_grpo.__class__(**{**tiny_grpo.__dict__, "global_batch": 6})  # 12 samples
    cm = CostModel(Topology(two_node_cluster), wf, CostOptions(train_micro_batch=1, load_balance=True))
    tc = cm.task_cost(TaskPlacement(ACTOR_TRAIN, Strategy(2, 1, 1), (0, 2)))
    # compute is 2:1, so the 12 samples split 8:4 (1 each + 10 in proportion, largest remainder)
    assert tc.samples == (8, 4)
