"""Rendering experiment results: the ``bench scaling`` JSON object, Markdown tables, PNG plots.

Plots follow the paper's figures: allocation over time per stage (Fig. 10-11 a/b), per-batch
extra delay sorted (Fig. 10c, 13b), worker-time normalised by busy time (Fig. 12), EBF vs FCFS
(Fig. 14a) and planner running time (Fig. 15). matplotlib runs headless (Agg).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distrs.sim.cluster import ReplayResult
from distrs.sim.experiments import EbfPoint, RuntimePoint


def scaling_json(results: dict[str, ReplayResult], max_extra_delay_s: float | None = None) -> dict[str, Any]:
    """``{"policies": {NAME: {worker_seconds, busy_seconds, extra_delay_s, batches, planner_s,
    ledger}}}``; with D given, also ``over_D``: every batch whose d exceeded it."""
    out: dict[str, Any] = {"policies": {}}
    for name, r in results.items():
        s = r.summary()
        if max_extra_delay_s is not None:
            s["over_D"] = [
                {"task": b.task, "iteration": b.iteration, "d": round(b.extra_delay, 3)}
                for b in r.batches
                if b.extra_delay > max_extra_delay_s + 1e-9
            ]
        out["policies"][name] = s
    return out


def scaling_markdown(
    title: str, results: dict[str, ReplayResult], ratios: dict[str, Any] | None = None
) -> str:
    stages = next(iter(results.values())).stages if results else []
    head = ["policy", *[f"{s} worker-s" for s in stages], *[f"{s} busy-s" for s in stages]]
    head += ["mean d (s)", "p99 d (s)", "max d (s)", "batches", "planner mean/max (s)"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        s = r.summary()
        d = s["extra_delay_s"]
        row = [
            name,
            *[f"{s['worker_seconds'][x]:,.0f}" for x in stages],
            *[f"{s['busy_seconds'][x]:,.0f}" for x in stages],
        ]
        row += [f"{d['mean']:.2f}", f"{d['p99']:.2f}", f"{d['max']:.2f}", str(s["batches"])]
        row += [f"{s['planner_s']['mean']:.3f} / {s['planner_s']['max']:.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    if ratios:
        lines.append("")
        for key, val in ratios.items():
            lines.append(f"- `{key}`: {val}")
    return "\n".join(lines) + "\n"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _step(points: Sequence[tuple[float, int]], max_points: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([p[0] for p in points])
    c = np.array([p[1] for p in points])
    if t.size > max_points:  # keep the shape: per time bin, the largest count
        bins = np.linspace(t[0], t[-1], max_points)
        idx = np.clip(np.searchsorted(bins, t) - 1, 0, max_points - 1)
        peak = np.zeros(max_points)
        np.maximum.at(peak, idx, c)
        return bins, peak
    return t, c


def _save(plt: Any, fig: Any, out: Path) -> Path:
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_allocation(results: dict[str, ReplayResult], out: Path, title: str) -> list[Path]:
    """One PNG per stage: allocated workers over time for every policy (Fig. 10a/b)."""
    plt = _plt()
    paths = []
    stages = next(iter(results.values())).stages if results else []
    for stage in stages:
        fig, ax = plt.subplots(figsize=(9, 3.2))
        for name, r in results.items():
            t, c = _step(r.timeline[stage])
            ax.step(t / 3600.0, c, where="post", label=name, linewidth=0.8)
        ax.set_xlabel("time (h)")
        ax.set_ylabel(f"{stage} workers")
        ax.set_title(f"{title}: {stage} allocation")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out.with_name(f"{out.stem}-alloc-{stage}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_delay(results: dict[str, ReplayResult], out: Path, title: str) -> Path:
    """Per-batch extra delay, sorted (Fig. 10c / 13b)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for name, r in results.items():
        d = np.sort([b.extra_delay for b in r.batches])
        ax.plot(np.arange(d.size), d, label=f"{name} (mean {d.mean():.2f} s)" if d.size else name)
    ax.set_xlabel("batches (sorted)")
    ax.set_ylabel("extra delay d (s)")
    ax.set_title(f"{title}: extra delay")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out.with_name(f"{out.stem}-delay.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_normalized(per_trace: dict[str, dict[str, ReplayResult]], out: Path, stage: str) -> Path:
    """Worker-seconds / busy-seconds of one stage per policy and trace (Fig. 12)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    traces = list(per_trace)
    policies = sorted({p for r in per_trace.values() for p in r})
    width = 0.8 / max(len(policies), 1)
    for j, pol in enumerate(policies):
        vals = []
        for tr in traces:
            r = per_trace[tr].get(pol)
            vals.append(
                r.worker_seconds[stage] / r.busy_seconds[stage] if r and r.busy_seconds[stage] else 0.0
            )
        ax.bar(np.arange(len(traces)) + j * width, vals, width, label=pol)
    ax.set_xticks(np.arange(len(traces)) + width * (len(policies) - 1) / 2, traces, fontsize=8)
    ax.set_ylabel(f"{stage} worker-s / busy-s")
    ax.axhline(1.0, color="k", linewidth=0.5)
    ax.legend(fontsize=7)
    return _save(plt, fig, out)


def plot_ebf(points: Sequence[EbfPoint], out: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    g = [p.gpus for p in points]
    ax.plot(g, [p.ebf_delay_s for p in points], marker="o", label="EBF")
    ax.plot(g, [p.fcfs_delay_s for p in points], marker="s", label="FCFS")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("GPU workers")
    ax.set_ylabel("mean extra delay (s)")
    ax.legend()
    return _save(plt, fig, out)


def plot_runtime(points: Sequence[RuntimePoint], out: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    x = [p.requests for p in points]
    stages = sorted({s for p in points for s in p.stage_seconds})
    bottom = np.zeros(len(points))
    for s in stages:
        v = np.array([p.stage_seconds.get(s, 0.0) for p in points])
        ax.bar(x, v, width=max(x) / (len(x) * 2.5), bottom=bottom, label=f"search {s}")
        bottom += v
    ax.plot(x, [p.seconds for p in points], "k.-", label="whole decision")
    ax.plot(x, [p.replan_seconds for p in points], "k.--", label="re-plan (previous answer as hint)")
    ax.set_xlabel("estimated requests")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=7)
    return _save(plt, fig, out)


def ebf_markdown(points: Sequence[EbfPoint], needed: dict[str, dict[str, int | None]]) -> str:
    lines = ["| GPU workers | EBF mean d (s) | FCFS mean d (s) |", "|---|---|---|"]
    lines += [f"| {p.gpus} | {p.ebf_delay_s:.2f} | {p.fcfs_delay_s:.2f} |" for p in points]
    lines.append("")
    for thr, v in needed.items():
        e, f = v.get("ebf"), v.get("fcfs")
        ratio = round(f / e, 2) if e and f else None
        lines.append(f"- mean d ≤ {thr} s: EBF needs {e} GPUs, FCFS {f} (FCFS/EBF = {ratio})")
    return "\n".join(lines) + "\n"


def runtime_markdown(points: Sequence[RuntimePoint]) -> str:
    lines = [
        "| active batches | estimated requests | first decision wall / CPU (s) | per stage search (s) "
        "| simulations | re-plan wall / CPU (s) | re-plan simulations |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in points:
        st = ", ".join(f"{k} {v:.3f}" for k, v in p.stage_seconds.items())
        lines.append(
            f"| {p.batches} | {p.requests} | {p.seconds:.3f} / {p.cpu_seconds:.3f} | {st} | {p.simulations} "
            f"| {p.replan_seconds:.3f} / {p.replan_cpu_seconds:.3f} | {p.replan_simulations} |"
        )
    return "\n".join(lines) + "\n"
