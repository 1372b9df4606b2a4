"""Where distrs's worker-seconds above Ideal go: the gap broken into causes that sum to it.

Two views of the same gap, per stage, both exact sums:

* **by cause**, a ladder of replays. Each rung grants the planner one more piece of the truth
  that Ideal has (``PolicyOptions.knowledge``), in this order:

  ====================  =====================================================================
  ``distrs``            Alg. 2's estimate from history (what the live planner runs)
  ``arrivals``          + the true arrival times of the requests still to come (stage times
                        still from history, at the same position in the batch)
  ``requests``          + every request's true stage times (T_b still estimated)
  ``exact``             + the true T_b: Ideal with the timeout-aware rule
  ``ideal``             − the timeout-aware rule
  ====================  =====================================================================

  A step's worker-seconds are the difference between its two rungs, so the steps sum to
  distrs − ideal: history misprediction of the arrival curve, of the stage times, of T_b, and
  the timeout reservations (the rule and the spare workers it keeps in tails). Each step is
  measured with the previous ones already granted (a different order would share the
  interactions differently).
* **by worker state** (``sim/ledger.py``): startup, ramp-up ahead of demand, idle between
  requests, scale-down lag. Busy time is the same under every policy, so the differences of
  these parts sum to the gap too; the ladder shows each step's change in each part.

Search overshoot (Alg. 1 stopping above the fewest workers that pass: the bisection under EBF
with several batches is not monotone, and each stage is sized with the others fixed) is not a
step of its own: it is in whichever rung it happens, Ideal's included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal

from distrs.sim.cluster import ClusterParams, ReplayResult, replay
from distrs.sim.ledger import PART_LABELS, PARTS
from distrs.sim.trace import Trace

Knowledge = Literal["estimate", "arrivals", "requests", "exact"]

RUNGS: tuple[tuple[str, str, Knowledge], ...] = (
    ("distrs", "distrs", "estimate"),
    ("arrivals", "distrs", "arrivals"),
    ("requests", "distrs", "requests"),
    ("exact", "distrs", "exact"),
    ("ideal", "ideal", "estimate"),
)
"""(rung name, policy, knowledge) from distrs to Ideal."""

STEPS: tuple[tuple[str, str, str], ...] = (
    ("arrival curve misestimated (history)", "distrs", "arrivals"),
    ("stage times misestimated (history)", "arrivals", "requests"),
    ("T_b misestimated (history)", "requests", "exact"),
    ("timeout reservations (timeout-aware rule)", "exact", "ideal"),
)
"""(cause, from rung, to rung): each step's worker-seconds are from − to."""


@dataclass
class Explanation:
    """The ladder's replays and the gap they explain."""

    rungs: dict[str, ReplayResult]

    @property
    def stages(self) -> list[str]:
        return self.rungs["distrs"].stages

    def gap(self, stage: str) -> float:
        return self.rungs["distrs"].worker_seconds[stage] - self.rungs["ideal"].worker_seconds[stage]

    def step(self, a: str, b: str, stage: str) -> dict[str, float]:
        """Worker-seconds of rung ``a`` minus rung ``b`` at ``stage``: total and per ledger part."""
        ra, rb = self.rungs[a], self.rungs[b]
        out = {"total": ra.worker_seconds[stage] - rb.worker_seconds[stage]}
        for part in PARTS:
            out[part] = ra.ledger[stage][part] - rb.ledger[stage][part]
        out["busy"] = ra.busy_seconds[stage] - rb.busy_seconds[stage]
        return out

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rungs": {}, "steps": {}, "gap": {}, "ideal": {}}
        for name, r in self.rungs.items():
            s = r.summary()
            out["rungs"][name] = {
                "worker_seconds": s["worker_seconds"],
                "extra_delay_s": s["extra_delay_s"],
                "ledger": {k: {p: round(v, 1) for p, v in d.items()} for k, d in r.ledger.items()},
            }
        for stage in self.stages:
            ideal = self.rungs["ideal"].worker_seconds[stage]
            out["ideal"][stage] = round(ideal, 1)
            out["gap"][stage] = round(self.gap(stage), 1)
            out["steps"][stage] = [
                {"cause": cause, **{k: round(v, 1) for k, v in self.step(a, b, stage).items()}}
                for cause, a, b in STEPS
            ]
        return out


def _one(args: tuple[Trace, ClusterParams]) -> ReplayResult:
    return replay(*args)


def explain(
    trace: Trace,
    params: ClusterParams,
    jobs: int = 1,
    have: Mapping[str, ReplayResult] | None = None,
) -> Explanation:
    """Replay every rung of the ladder (reusing ``have['distrs']`` / ``have['ideal']`` when the
    caller already replayed them with the same ``params``)."""
    have = dict(have or {})
    todo = [
        (name, replace(params, policy=policy, options=replace(params.options, knowledge=knowledge)))
        for name, policy, knowledge in RUNGS
        if name not in have
    ]
    if jobs > 1 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            done = list(pool.map(_one, [(trace, p) for _, p in todo]))
    else:
        done = [_one((trace, p)) for _, p in todo]
    have.update({name: r for (name, _), r in zip(todo, done, strict=True)})
    return Explanation({name: have[name] for name, _, _ in RUNGS})


def _pct(x: float, of: float) -> str:
    return f"{100 * x / of:+.1f} %" if of else "-"


def explain_markdown(ex: Explanation, title: str) -> str:
    """Per stage: the gap by cause (rows) and by worker state (columns); rows and columns sum
    to the gap."""
    lines = [f"### Where distrs's worker-seconds above Ideal go: {title}", ""]
    cols = ["startup", "ahead", "between", "after"]
    head = ["ramp-up ahead" if c == "ahead" else "scale-down lag" if c == "after" else c for c in cols]
    for stage in ex.stages:
        ideal = ex.rungs["ideal"].worker_seconds[stage]
        gap = ex.gap(stage)
        lines += [
            f"**{stage}**: distrs {ex.rungs['distrs'].worker_seconds[stage]:,.0f}, ideal {ideal:,.0f} "
            f"worker-seconds; gap {gap:,.0f} ({_pct(gap, ideal)} of ideal)",
            "",
            "| cause | worker-s | of ideal | " + " | ".join(head) + " |",
            "|---|---|---|" + "---|" * len(cols),
        ]
        rows = [(cause, ex.step(a, b, stage)) for cause, a, b in STEPS]
        total = {k: sum(r[k] for _, r in rows) for k in ["total", *cols, "handoff"]}
        for cause, row in [*rows, ("**total = distrs − ideal**", total)]:
            cells = " | ".join(f"{row[c]:,.0f}" for c in cols)
            lines.append(f"| {cause} | {row['total']:,.0f} | {_pct(row['total'], ideal)} | {cells} |")
        lines.append("")
    lines += [
        "Columns: " + "; ".join(f"{h}: {PART_LABELS[c]}" for h, c in zip(head, cols, strict=True)) + ".",
        "",
        "| rung | "
        + " | ".join(f"{s} worker-s" for s in ex.stages)
        + " | mean d (s) | p99 d (s) | max d (s) |",
        "|---|" + "---|" * (len(ex.stages) + 3),
    ]
    for name, r in ex.rungs.items():
        d = r.summary()["extra_delay_s"]
        ws = " | ".join(f"{r.worker_seconds[s]:,.0f}" for s in ex.stages)
        lines.append(f"| {name} | {ws} | {d['mean']:.2f} | {d['p99']:.2f} | {d['max']:.2f} |")
    lines.append("")
    return "\n".join(lines)


def ledger_markdown(results: Mapping[str, ReplayResult], stages: Sequence[str]) -> str:
    """Allocated worker-seconds by worker state, per policy and stage."""
    parts = ["busy", *PARTS]
    lines = [
        "| policy | stage | allocated | " + " | ".join(parts) + " |",
        "|---|---|---|" + "---|" * len(parts),
    ]
    for name, r in results.items():
        for s in stages:
            vals = [r.busy_seconds[s], *(r.ledger[s][p] for p in PARTS)]
            cells = " | ".join(f"{v:,.0f}" for v in vals)
            lines.append(f"| {name} | {s} | {r.worker_seconds[s]:,.0f} | {cells} |")
    return "\n".join(lines) + "\n"
