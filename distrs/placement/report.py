"""Plan documents: one JSON shape for every algorithm, and the human-readable summary table.

``run`` dispatches to an algorithm and returns the plan document consumed by the CLI, the
manifest renderer and the picture. Top level: ``algorithm``, ``iteration_time_s``,
``throughput_tokens_s``, ``cost_per_hour``, ``search_s``, ``cluster``, ``workflow``,
``groups``. Each group: ``name``, ``tasks``, ``gpus`` (device indices), ``nodes`` and
``gpu_types`` (GPU counts), ``parallel`` ({task: {dp, pp, tp, layers, stage_gpu_types}}),
and for the async/heterogeneous schedulers ``stages`` (per pipeline stage: GPU type, DP, TP,
layers, GPUs) or ``replicas`` (rollout replica configurations with counts and workloads).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from distrs.placement import areal_hex, baselines, espresso, hetrl
from distrs.placement.costmodel import CostModel, Evaluation
from distrs.placement.plan import ACTOR_TRAIN, GEN, REF_INF, Plan
from distrs.placement.specs import ClusterSpec, WorkflowSpec
from distrs.placement.topology import Topology

ALGORITHMS = ("hetrl", "hetrl-ilp", "areal-hex", "espresso", "verl-baseline", "streamrl-baseline")


class PlanningError(RuntimeError):
    """No feasible plan exists (or none was found within the budget)."""


def _gpus_summary(topo: Topology, devices: list[int] | tuple[int, ...]) -> dict[str, Any]:
    return {
        "gpus": [int(d) for d in devices],
        "nodes": dict(Counter(topo.devices[d].node for d in devices)),
        "gpu_types": dict(Counter(topo.devices[d].gpu.name for d in devices)),
        "regions": dict(Counter(topo.devices[d].region for d in devices)),
    }


def hetrl_document(
    cm: CostModel, plan: Plan, ev: Evaluation, algorithm: str, search_s: float
) -> dict[str, Any]:
    topo = cm.topo
    groups = []
    for gi, g in enumerate(plan.groups):
        parallel = {}
        for p in g.placements:
            tc = ev.tasks[p.task]
            s = p.strategy
            parallel[p.task] = {
                "dp": s.dp,
                "pp": s.pp,
                "tp": s.tp,
                "layers": list(tc.layers),
                "stage_gpu_types": [
                    sorted({topo.devices[d].gpu.name for d in p.stage_devices(0, j)}) for j in range(s.pp)
                ],
                "samples_per_replica": list(tc.samples),
                "cost_s": round(tc.total, 6),
                "tasklets": [int(d) for d in p.devices],
            }
        groups.append(
            {
                "name": f"group-{gi}",
                "tasks": list(g.tasks),
                **_gpus_summary(topo, g.devices),
                "parallel": parallel,
            }
        )
    return _top(
        cm,
        algorithm,
        ev.total,
        ev.throughput(cm.wf),
        plan.devices,
        search_s,
        groups,
        {"weight_transfer_s": ev.weight_transfer},
    )


def _top(
    cm: CostModel,
    algorithm: str,
    iteration: float,
    throughput: float,
    used: Any,
    search_s: float,
    groups: list,
    extra: dict,
) -> dict[str, Any]:  # type: ignore[type-arg]
    cost = cm.topo.price_per_hour(list(used))
    return {
        "algorithm": algorithm,
        "iteration_time_s": round(iteration, 6),
        "throughput_tokens_s": round(throughput, 3),
        "cost_per_hour": round(cost, 4),
        "throughput_per_dollar": round(throughput / cost, 4) if cost else None,
        "search_s": round(search_s, 3),
        "cluster": cm.topo.cluster.name,
        "workflow": {
            "name": cm.wf.name,
            "algorithm": cm.wf.algorithm,
            "mode": cm.wf.mode,
            "samples": cm.wf.samples,
        },
        "num_gpus_used": len(list(used)),
        "groups": groups,
        **extra,
    }


def areal_document(cm: CostModel, r: areal_hex.ArealResult) -> dict[str, Any]:
    topo = cm.topo
    rollout_gpus = [d for _, _, _, g in r.rollout.replicas for d in g]
    replicas = [
        {
            "stages": [[t, tp] for t, tp in c.stages],
            "count": y,
            "rollouts": x,
            "tokens_per_s": round(c.throughput, 2),
            "gpus": list(g),
        }
        for c, y, x, g in r.rollout.replicas
    ]
    stages = [
        {"gpu_type": s.gpu_type, "dp": s.dp, "tp": s.tp, "layers": s.layers, "gpus": list(s.devices)}
        for s in r.train.stages
    ]
    train_parallel = {
        "dp": max(s.dp for s in r.train.stages),
        "pp": len(r.train.stages),
        "tp": max(s.tp for s in r.train.stages),
        "layers": [s.layers for s in r.train.stages],
        "stage_gpu_types": [[s.gpu_type] for s in r.train.stages],
        "stage_dp": [s.dp for s in r.train.stages],
        "stage_tp": [s.tp for s in r.train.stages],
    }
    rollout_tp = max(tp for c, _, _, _ in r.rollout.replicas for _, tp in c.stages)
    groups = [
        {
            "name": "rollout",
            "tasks": [GEN],
            **_gpus_summary(topo, rollout_gpus),
            "parallel": {
                GEN: {
                    "dp": sum(y for _, y, _, _ in r.rollout.replicas),
                    "pp": 1,
                    "tp": rollout_tp,
                    "layers": [],
                }
            },
            "replicas": replicas,
        },
        {
            "name": "train",
            "tasks": [REF_INF, ACTOR_TRAIN],
            **_gpus_summary(topo, [d for s in r.train.stages for d in s.devices]),
            "parallel": {ACTOR_TRAIN: train_parallel, REF_INF: train_parallel},
            "stages": stages,
        },
    ]
    used = rollout_gpus + [d for s in r.train.stages for d in s.devices]
    return _top(
        cm,
        "areal-hex",
        r.iteration_s,
        r.throughput_tokens_s,
        used,
        r.search_s,
        groups,
        {
            "c_train_s": r.c_train,
            "c_rollout_s": r.c_infer,
            "c_update_s": r.c_update,
            "gamma": r.gamma,
            "iterations": r.iterations,
        },
    )


def espresso_document(
    cm: CostModel, p: espresso.EspressoPlan, search_s: float, slo: float, homo: espresso.EspressoPlan | None
) -> dict[str, Any]:
    topo = cm.topo
    gpus = [d for s in p.stages for d in s.devices]
    parallel = {
        "dp": p.dp,
        "pp": len(p.stages),
        "tp": 1,
        "layers": [s.layers for s in p.stages],
        "stage_gpu_types": [[s.gpu_type] for s in p.stages],
    }
    groups = [
        {
            "name": "train",
            "tasks": [ACTOR_TRAIN],
            **_gpus_summary(topo, gpus),
            "parallel": {ACTOR_TRAIN: parallel},
            "stages": [
                {"gpu_type": s.gpu_type, "dp": p.dp, "tp": 1, "layers": s.layers, "gpus": list(s.devices)}
                for s in p.stages
            ],
        }
    ]
    tokens = cm.wf.samples * (cm.wf.seq_in + cm.wf.seq_out)
    extra = {
        "slo_iteration_s": slo,
        "cost_per_iteration": p.cost_per_iteration,
        "job": "policy update (actor training)",
        "cheapest_homogeneous": None
        if homo is None
        else {
            "gpu_counts": homo.counts,
            "iteration_time_s": homo.iteration_s,
            "cost_per_hour": homo.price_per_hour,
            "cost_per_iteration": homo.cost_per_iteration,
        },
    }
    return _top(cm, "espresso", p.iteration_s, tokens / p.iteration_s, gpus, search_s, groups, extra)


def run(
    cluster: ClusterSpec, wf: WorkflowSpec, algorithm: str, budget_s: float = 60.0, seed: int = 0
) -> dict[str, Any]:
    """Run one algorithm and return its plan document."""
    if algorithm not in ALGORITHMS:
        raise PlanningError(f"--algorithm: expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    import time

    cm = CostModel(Topology(cluster), wf)
    t0 = time.perf_counter()
    if algorithm == "hetrl":
        plan, ev, stats = hetrl.schedule(cm, budget_s=budget_s, seed=seed)
        if plan is None or ev is None:
            raise PlanningError("hetrl: no feasible plan found within the budget")
        doc = hetrl_document(cm, plan, ev, algorithm, stats.search_s)
        doc["search"] = {
            "generations": stats.generations,
            "arms_level1": stats.arms_level1,
            "arms_level2": stats.arms_level2,
            "rounds": stats.rounds,
        }
        return doc
    if algorithm == "hetrl-ilp":
        from distrs.placement import hetrl_ilp  # ortools is only loaded when asked for

        plan, ev, istats = hetrl_ilp.schedule(cm, time_limit_s=budget_s)
        if plan is None or ev is None:
            raise PlanningError(f"hetrl-ilp: no plan ({istats.status})")
        doc = hetrl_document(cm, plan, ev, algorithm, time.perf_counter() - t0)
        doc["search"] = {
            "status": istats.status,
            "optimal": istats.optimal,
            "candidates": istats.candidates,
            "objective_s": istats.objective_s,
        }
        return doc
    if algorithm in ("verl-baseline", "streamrl-baseline"):
        fn = baselines.verl_baseline if algorithm == "verl-baseline" else baselines.streamrl_baseline
        plan, ev = fn(cm)
        if plan is None or ev is None:
            raise PlanningError(f"{algorithm}: no feasible plan")
        return hetrl_document(cm, plan, ev, algorithm, time.perf_counter() - t0)
    if algorithm == "areal-hex":
        if wf.mode != "async":
            raise PlanningError("areal-hex schedules asynchronous RL: set mode: async in the workflow")
        r = areal_hex.schedule(cm)
        if r is None:
            raise PlanningError("areal-hex: no feasible plan")
        return areal_document(cm, r)
    if wf.slo_iteration_s is None:
        raise PlanningError("espresso needs slo_iteration_s in the workflow")
    p, st = espresso.allocate(cm, wf.slo_iteration_s)
    if p is None:
        raise PlanningError(f"espresso: no allocation meets the {wf.slo_iteration_s} s SLO")
    return espresso_document(
        cm, p, st.search_s, wf.slo_iteration_s, espresso.cheapest_homogeneous(cm, wf.slo_iteration_s)
    )


def summary_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Rows of the plan summary table: group, tasks, GPUs, parallel sizes, layer split."""
    rows = []
    for g in doc["groups"]:
        gpus = ", ".join(f"{n}×{t}" for t, n in sorted(g["gpu_types"].items()))
        for task, par in g["parallel"].items():
            layers = par.get("layers") or []
            rows.append(
                [
                    g["name"],
                    task,
                    gpus,
                    f"DP={par['dp']} PP={par['pp']} TP={par['tp']}",
                    "/".join(str(x) for x in layers) if layers else "-",
                ]
            )
    return rows


SUMMARY_HEADER = ["group", "task", "GPUs", "parallel", "layers per stage"]
