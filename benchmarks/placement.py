"""Placement benchmarks (issue targets), measured in the HetRL cost model.

Writes ``benchmarks/results/placement.json`` and ``.md``:

1. ILP vs SHA-EA on ≤ 24-GPU clusters (HetRL Fig. 6): ILP time to optimum, SHA-EA gap.
2. SHA-EA (60 s) vs the verl-like and StreamRL-like baselines on the 64-GPU HetRL testbed in
   its four network scenarios.
3. AReaL-Hex: scheduling time at 24 GPUs; throughput per dollar of the heterogeneous plan vs
   the two equal-budget homogeneous plans.
4. Espresso: cost of its plan vs the cheapest homogeneous plan meeting the same SLO.

Usage: ``python benchmarks/placement.py [--quick]`` (``--quick`` shrinks budgets for a smoke run).
Nothing here asserts timings; the numbers are reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

from distrs.placement import areal_hex, baselines, espresso, hetrl, hetrl_ilp
from distrs.placement.costmodel import CostModel
from distrs.placement.specs import ClusterSpec, load_cluster, load_workflow
from distrs.placement.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "distrs" / "placement" / "examples"
RESULTS = ROOT / "benchmarks" / "results"
SCENARIOS = {
    "single-region": "hetrl-single-region.yaml",
    "multi-region-hybrid": "hetrl-multi-region-hybrid.yaml",
    "multi-country": "hetrl-multi-country.yaml",
    "multi-continent": "hetrl-multi-continent.yaml",
}


def cm_for(cluster: str | ClusterSpec, workflow: str) -> CostModel:
    c = load_cluster(EXAMPLES / cluster) if isinstance(cluster, str) else cluster
    return CostModel(Topology(c), load_workflow(EXAMPLES / workflow))


def bench_ilp(quick: bool) -> list[dict]:
    out = []
    two_regions = load_cluster(EXAMPLES / "small-16gpu-two-regions.yaml")
    cases: list[tuple[str | ClusterSpec, str]] = [
        (_subset(two_regions, 4, "small-12gpu-two-regions"), "qwen3-4b-ppo-sync.yaml"),
        ("small-16gpu-two-regions.yaml", "qwen3-4b-ppo-sync.yaml"),
        ("small-24gpu-single-region.yaml", "qwen3-4b-ppo-sync.yaml"),
    ]
    for cluster, wf in cases:
        cm = cm_for(cluster, wf)
        label = cluster if isinstance(cluster, str) else cluster.name
        t0 = time.perf_counter()
        _, iev, st = hetrl_ilp.schedule(cm, time_limit_s=60 if quick else 180)
        ilp_s = time.perf_counter() - t0
        row = {
            "cluster": label,
            "workflow": wf,
            "gpus": cm.topo.n,
            "ilp_status": st.status,
            "ilp_optimal": st.optimal,
            "ilp_s": round(ilp_s, 2),
            "ilp_build_s": round(st.build_s, 2),
            "ilp_candidates": st.candidates,
            "ilp_iteration_s": None if iev is None else round(iev.total, 4),
            "ilp_bound_s": round(st.bound_s, 4),
        }
        for budget in (10, 60) if not quick else (5,):
            cm2 = cm_for(cluster, wf)
            _, ev, _ = hetrl.schedule(cm2, budget_s=budget, seed=0)
            row[f"sha_ea_{budget}s_iteration_s"] = None if ev is None else round(ev.total, 4)
            if ev is not None and iev is not None:
                row[f"sha_ea_{budget}s_gap_pct"] = round(100 * (ev.total - iev.total) / iev.total, 3)
        out.append(row)
        print("ilp", row, flush=True)
    return out


def bench_scenarios(quick: bool) -> list[dict]:
    out = []
    budget = 8 if quick else 60
    for wf in ("qwen3-8b-ppo-sync.yaml", "qwen3-8b-grpo-async.yaml"):
        for name, cluster in SCENARIOS.items():
            cm = cm_for(cluster, wf)
            t0 = time.perf_counter()
            _, ev, st = hetrl.schedule(cm, budget_s=budget, seed=0)
            sha_s = time.perf_counter() - t0
            _, vev = baselines.verl_baseline(cm_for(cluster, wf))
            _, sev = baselines.streamrl_baseline(cm_for(cluster, wf))
            row = {
                "workflow": wf,
                "scenario": name,
                "sha_ea_s": round(sha_s, 1),
                "sha_ea_generations": st.generations,
                "hetrl_iteration_s": None if ev is None else round(ev.total, 2),
                "verl_iteration_s": None if vev is None else round(vev.total, 2),
                "streamrl_iteration_s": None if sev is None else round(sev.total, 2),
            }
            if ev is not None and vev is not None:
                row["speedup_vs_verl"] = round(vev.total / ev.total, 2)
            if ev is not None and sev is not None:
                row["speedup_vs_streamrl"] = round(sev.total / ev.total, 2)
            out.append(row)
            print("scenario", row, flush=True)
    return out


def _subset(cluster: ClusterSpec, per_type: int, name: str) -> ClusterSpec:
    nodes = []
    left: dict[str, int] = {}
    for n in cluster.nodes:
        have = left.setdefault(n.gpu, per_type)
        if have <= 0:
            continue
        take = min(have, n.count)
        nodes.append(replace(n, count=take))
        left[n.gpu] = have - take
    return ClusterSpec(name, cluster.gpu_types, tuple(nodes), cluster.network)


def bench_areal() -> dict:
    wf = "areal-r1-distill-7b-grpo-async.yaml"
    hetero = load_cluster(EXAMPLES / "areal-hex-h800-h20.yaml")
    small = _subset(hetero, 12, "areal-hex-24gpu")
    t0 = time.perf_counter()
    r24 = areal_hex.schedule(cm_for(small, wf))
    t24 = time.perf_counter() - t0
    rows: dict[str, dict[str, float] | None] = {}
    for label, cluster in (
        ("hetero 24 H800 + 24 H20", "areal-hex-h800-h20.yaml"),
        ("32 H800", "areal-hex-h800-32.yaml"),
        ("88 H20", "areal-hex-h20-88.yaml"),
    ):
        t0 = time.perf_counter()
        r = areal_hex.schedule(cm_for(cluster, wf))
        el = time.perf_counter() - t0
        if r is None:
            rows[label] = None
            continue
        rows[label] = {
            "schedule_s": round(el, 2),
            "iteration_s": round(r.iteration_s, 1),
            "throughput_tokens_s": round(r.throughput_tokens_s),
            "cost_per_hour": round(r.cost_per_hour, 2),
            "tokens_per_dollar_hour": round(r.throughput_tokens_s / r.cost_per_hour, 1),
            "train_gpus": len(r.train_devices),
            "rollout_gpus": len(r.rollout_devices),
        }
    out = {
        "schedule_24gpu_s": round(t24, 2),
        "iterations_24gpu": None if r24 is None else r24.iterations,
        "plans": rows,
    }
    print("areal", out, flush=True)
    return out


def bench_espresso() -> list[dict]:
    cm = cm_for("espresso-juchi.yaml", "espresso-qwen3-4b-grpo-slo.yaml")
    out = []
    for slo in (3.0, 4.0, 5.0, 5.5, 6.0, 8.0):
        t0 = time.perf_counter()
        p, st = espresso.allocate(cm, slo)
        el = time.perf_counter() - t0
        h = espresso.cheapest_homogeneous(cm, slo)
        row = {
            "slo_s": slo,
            "search_s": round(el, 2),
            "espresso_gpus": None if p is None else p.counts,
            "espresso_iteration_s": None if p is None else round(p.iteration_s, 2),
            "espresso_cost_per_iteration": None if p is None else round(p.cost_per_iteration, 5),
            "homogeneous_gpus": None if h is None else h.counts,
            "homogeneous_iteration_s": None if h is None else round(h.iteration_s, 2),
            "homogeneous_cost_per_iteration": None if h is None else round(h.cost_per_iteration, 5),
            "pruned_tcp": st.pruned_tcp,
            "pruned_cp": st.pruned_cp,
        }
        if p is not None and h is not None:
            row["saving_pct"] = round(100 * (1 - p.cost_per_iteration / h.cost_per_iteration), 2)
        out.append(row)
        print("espresso", row, flush=True)
    return out


def markdown(res: dict) -> str:
    lines = [
        "# Placement benchmarks",
        "",
        f"Machine: {res['machine']}; all figures are cost-model estimates.",
        "",
    ]
    lines += [
        "## ILP vs SHA-EA (≤ 24 GPUs)",
        "",
        "| cluster | GPUs | ILP status | ILP s | ILP iteration s | ILP lower bound s "
        "| SHA-EA 10 s iteration s | gap % | SHA-EA 60 s iteration s | gap % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["ilp"]:
        lines.append(
            f"| {r['cluster']} | {r['gpus']} | {r['ilp_status']} | {r['ilp_s']} | {r['ilp_iteration_s']} "
            f"| {r['ilp_bound_s']} | {r.get('sha_ea_10s_iteration_s')} | {r.get('sha_ea_10s_gap_pct')} "
            f"| {r.get('sha_ea_60s_iteration_s')} | {r.get('sha_ea_60s_gap_pct')} |"
        )
    lines += [
        "",
        "## SHA-EA vs baselines, 64 GPUs (24 A100 + 24 L40S + 16 L4)",
        "",
        "| workflow | scenario | HetRL s/iter | verl s/iter | StreamRL s/iter | × vs verl | × vs StreamRL | search s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["scenarios"]:
        lines.append(
            f"| {r['workflow']} | {r['scenario']} | {r['hetrl_iteration_s']} | {r['verl_iteration_s']} | {r['streamrl_iteration_s']} | {r.get('speedup_vs_verl')} | {r.get('speedup_vs_streamrl')} | {r['sha_ea_s']} |"
        )
    a = res["areal"]
    lines += [
        "",
        "## AReaL-Hex",
        "",
        f"Scheduling 24 GPUs (12 H800 + 12 H20): {a['schedule_24gpu_s']} s ({a['iterations_24gpu']} iterations).",
        "",
        "| cluster | s/iter | tokens/s | $/h | tokens/s per $/h | train GPUs | rollout GPUs | schedule s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in a["plans"].items():
        if r:
            lines.append(
                f"| {label} | {r['iteration_s']} | {r['throughput_tokens_s']} | {r['cost_per_hour']} | {r['tokens_per_dollar_hour']} | {r['train_gpus']} | {r['rollout_gpus']} | {r['schedule_s']} |"
            )
    lines += [
        "",
        "## Espresso (policy-update job, Espresso Table I GPUs)",
        "",
        "| SLO s | Espresso GPUs | s/iter | cost/iter | cheapest homogeneous | s/iter | cost/iter | saving % | search s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["espresso"]:
        lines.append(
            f"| {r['slo_s']} | {r['espresso_gpus']} | {r['espresso_iteration_s']} | {r['espresso_cost_per_iteration']} | {r['homogeneous_gpus'] or 'none meets the SLO'} | {r['homogeneous_iteration_s']} | {r['homogeneous_cost_per_iteration']} | {r.get('saving_pct', '-')} | {r['search_s']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["ilp", "scenarios", "areal", "espresso"], action="append")
    args = ap.parse_args()
    only = set(args.only or ["ilp", "scenarios", "areal", "espresso"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "placement.json"
    res = json.loads(path.read_text()) if path.exists() and args.only else {}
    res["machine"] = (
        f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} CPUs, Python {platform.python_version()}"
    )
    if "ilp" in only:
        res["ilp"] = bench_ilp(args.quick)
    if "scenarios" in only:
        res["scenarios"] = bench_scenarios(args.quick)
    if "areal" in only:
        res["areal"] = bench_areal()
    if "espresso" in only:
        res["espresso"] = bench_espresso()
    path.write_text(json.dumps(res, indent=2) + "\n")
    if all(k in res for k in ("ilp", "scenarios", "areal", "espresso")):
        (RESULTS / "placement.md").write_text(markdown(res))


if __name__ == "__main__":
    main()
