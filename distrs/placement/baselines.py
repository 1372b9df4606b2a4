"""Baseline placements the HetRL paper compares against (§5.1), evaluated in the same cost model.

* ``verl_baseline`` — homogeneity-unaware, like verl's auto-mapping: every task colocated on
  all GPUs (sync; one rollout pool and one training pool of equal size in async mode), parallel
  sizes chosen as if every GPU were the first node's type on a single uniform network, tasklets
  laid out in the cluster's listed GPU order, layers and samples split evenly (no load
  balancing). Among its choices it keeps the cheapest (by its homogeneous view) that actually
  fits in memory on the real GPUs, as a user would when the first choice runs out of memory.
* ``streamrl_baseline`` — StreamRL-like: two groups, actor generation vs. all other tasks, each
  group made of the GPUs of one type in one region ("one data centre"); it searches over
  those block pairs and the parallel sizes with the real cost model.
"""

from __future__ import annotations

from dataclasses import replace

from distrs.placement.costmodel import CostModel, Evaluation
from distrs.placement.plan import GEN, Plan, TaskGroup, TaskPlacement
from distrs.placement.space import GroupBuilder, layout, strategies
from distrs.placement.specs import ClusterSpec, NetworkProfile, Node
from distrs.placement.topology import Topology


def _homogeneous_view(cluster: ClusterSpec) -> ClusterSpec:
    gpu = cluster.nodes[0].gpu
    nodes = tuple(Node(n.name, gpu, n.count, "r0", "") for n in cluster.nodes)
    return ClusterSpec(
        cluster.name + "-homogeneous-view", cluster.gpu_types, nodes, NetworkProfile(cluster.network.default)
    )


def verl_baseline(cm: CostModel) -> tuple[Plan | None, Evaluation | None]:
    """verl-like plan: one Megatron (DP, PP, TP) for every training and inference worker and a
    rollout TP for generation (its DP fills the pool), as verl's config does; the pair is ranked
    by the homogeneous view and the first pair that fits on the real GPUs is used."""
    wf = cm.wf
    view = CostModel(Topology(_homogeneous_view(cm.topo.cluster)), wf, replace(cm.opts, load_balance=False))
    real = CostModel(cm.topo, wf, replace(cm.opts, load_balance=False))
    n = cm.topo.n
    listed = list(range(n))
    if wf.mode == "sync":
        grouping: list[tuple[str, ...]] = [tuple(cm.tasks)]
        assignment = [listed]
    else:
        half = n // 2
        grouping = [(GEN,), tuple(t for t in cm.tasks if t != GEN)]
        assignment = [listed[:half], listed[half:]]
    max_tp = max(node.count for node in cm.topo.cluster.nodes)
    layers = wf.model("actor").layers
    gen_devs = assignment[0]
    work_devs = assignment[-1]
    candidates = []
    for megatron in strategies(len(work_devs), layers, max_tp, wf.samples):
        for rollout in strategies(len(gen_devs), layers, max_tp, wf.samples):
            if rollout.pp != 1:
                continue
            groups = []
            for tasks, devs in zip(grouping, assignment, strict=True):
                placements = tuple(
                    TaskPlacement(
                        t,
                        rollout if t == GEN else megatron,
                        layout(devs, rollout if t == GEN else megatron, "replica-major"),
                    )
                    for t in tasks
                )
                groups.append(TaskGroup(tasks, tuple(devs), placements))
            plan = Plan(tuple(groups), "verl-baseline")
            ev = view.evaluate(plan)
            if ev.feasible:
                candidates.append((ev.total, plan))
    candidates.sort(key=lambda x: x[0])
    for _, plan in candidates:
        ev = real.evaluate(plan)
        if ev.feasible:
            return plan, ev
    return None, None


def _blocks(topo: Topology) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for d in topo.devices:
        out.setdefault((d.gpu.name, d.region), []).append(d.index)
    return out


def streamrl_baseline(cm: CostModel) -> tuple[Plan | None, Evaluation | None]:
    builder = GroupBuilder(cm)
    rest = tuple(t for t in cm.tasks if t != GEN)
    best: tuple[Plan, Evaluation] | None = None
    blocks = _blocks(cm.topo)
    for gen_key, gen_devs in blocks.items():
        for train_key, train_devs in blocks.items():
            if gen_key == train_key:
                continue
            plan = builder.build_plan([(GEN,), rest], [gen_devs, train_devs])
            if plan is None:
                continue
            ev = cm.evaluate(plan)
            if ev.feasible and (best is None or ev.total < best[1].total):
                best = (plan.with_algorithm("streamrl-baseline", blocks=[list(gen_key), list(train_key)]), ev)
    return best if best else (None, None)
