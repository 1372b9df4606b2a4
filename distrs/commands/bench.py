"""``distrs bench scaling | ebf | planner-runtime``: the DistRS evaluation on any trace.

``scaling`` replays a ``distrs-trace/1`` trace under each policy side by side and prints a
Markdown table; ``--json`` writes ``{"policies": {NAME: {worker_seconds, busy_seconds,
extra_delay_s {mean,p50,p99,max}, batches, planner_s {mean,max}, ledger, over_D}}}``, ``--plots``
writes PNGs like Fig. 10-13, ``--explain`` adds the breakdown of distrs's worker-seconds above
ideal (``sim/explain.py``) to both. ``ebf`` sweeps GPU workers for two batches 100 s apart (Fig. 14);
``planner-runtime`` times one decision against the number of estimated requests (Fig. 15).
``--trace demo`` uses the small trace shipped with the package.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)

TraceOpt = Annotated[
    str, typer.Option("--trace", help="Trace (NAME, NAME.csv.gz or NAME.meta.json), or 'demo'.")
]


@contextlib.contextmanager
def trace_path(spec: str) -> Iterator[Path]:
    """A filesystem path for ``spec``; 'demo' is the packaged demo trace."""
    if spec != "demo":
        yield Path(spec)
        return
    data = resources.files("distrs.sim").joinpath("data")
    with (
        resources.as_file(data.joinpath("demo.csv.gz")) as csv_path,
        resources.as_file(data.joinpath("demo.meta.json")),
    ):
        yield csv_path


def _load(spec: str, iterations: int | None) -> Any:
    from distrs.sim.trace import TraceError, load

    with trace_path(spec) as p:
        try:
            tr = load(p)
        except (TraceError, OSError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--trace") from exc
    if iterations is not None:
        tr = tr.select(tr.iteration < iterations)
    return tr


def _write_json(path: Path | None, obj: Any) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")
    typer.echo(f"wrote {path}")


@app.command()
def scaling(
    trace: TraceOpt,
    policies: Annotated[
        str, typer.Option(help="Comma-separated: distrs, history, zq-dedicated, ideal, static.")
    ] = "distrs,history,zq-dedicated,ideal",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results JSON here.")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write the Markdown table here.")] = None,
    plots: Annotated[
        Path | None, typer.Option(help="Write PNG plots with this path prefix (e.g. out/colocated).")
    ] = None,
    max_extra_delay: Annotated[float, typer.Option(help="D: tolerated extra delay per batch (s).")] = 2.0,
    cold_start: Annotated[float, typer.Option(help="Seconds before a new worker can take work.")] = 15.0,
    iterations: Annotated[int | None, typer.Option(help="Only the first N iterations of each task.")] = None,
    static_replicas: Annotated[int, typer.Option(help="Workers per stage for the static policy.")] = 16,
    jobs: Annotated[
        int, typer.Option(min=1, help="Replay this many policies at once (processes; default: CPU count).")
    ] = max(1, os.cpu_count() or 1),
    replan_interval: Annotated[
        float,
        typer.Option(
            help="Also re-plan every S seconds while batches are active (0 = only at batch events)."
        ),
    ] = 15.0,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Also break distrs's worker-seconds above ideal into causes (three more replays; "
            "docs/scaling.md, 'Where the gap to Ideal goes').",
        ),
    ] = False,
) -> None:
    """Replay a trace under each policy; worker-seconds, busy-seconds and extra delay."""
    from distrs.scaling.context import PolicyOptions
    from distrs.scaling.policies import POLICIES
    from distrs.sim.cluster import ClusterParams
    from distrs.sim.experiments import compare_policies, ratios
    from distrs.sim.report import plot_allocation, plot_delay, scaling_json, scaling_markdown

    names = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if bad or not names:
        raise typer.BadParameter(
            f"unknown policies {bad}; choose from {sorted(POLICIES)}", param_hint="--policies"
        )
    tr = _load(trace, iterations)
    params = ClusterParams(
        max_extra_delay_s=max_extra_delay,
        cold_start_s=cold_start,
        replan_interval_s=replan_interval or None,
        options=PolicyOptions(static_replicas=static_replicas),
    )
    results = compare_policies(tr, names, params, jobs=jobs)
    md = scaling_markdown(f"{trace}: {tr.n} requests", results, ratios(results))
    out = scaling_json(results, max_extra_delay)
    if explain:
        from distrs.sim.explain import explain as break_down
        from distrs.sim.explain import explain_markdown, ledger_markdown

        ex = break_down(tr, params, jobs=jobs, have=results)
        md += "\n" + explain_markdown(ex, f"{trace}") + "\n" + ledger_markdown(results, ex.stages)
        out["explain"] = ex.as_json()
    typer.echo(md)
    _write_json(json_out, out)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(md)
    if plots is not None:
        plots.parent.mkdir(parents=True, exist_ok=True)
        for p in [
            *plot_allocation(results, plots, Path(trace).name),
            plot_delay(results, plots, Path(trace).name),
        ]:
            typer.echo(f"wrote {p}")


@app.command()
def ebf(
    trace: TraceOpt,
    gpus: Annotated[
        str, typer.Option(help="GPU worker counts to sweep, comma-separated.")
    ] = "8,12,16,20,24,28,30,32,34,36,38,40,42,44,46,48,52,56,64",
    gap: Annotated[float, typer.Option(help="Seconds between the two rollouts.")] = 100.0,
    iteration: Annotated[
        int, typer.Option(help="Which iteration of the trace to take the batches from.")
    ] = 0,
    threshold: Annotated[
        float, typer.Option(help="'Low' mean extra delay (s) for the GPUs-needed comparison.")
    ] = 5.0,
    json_out: Annotated[Path | None, typer.Option("--json")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the PNG here.")] = None,
) -> None:
    """Two batches 100 s apart, CPU unconstrained, GPU workers swept: EBF vs FCFS (Fig. 14)."""
    from distrs.sim.experiments import ebf_sweep, gpus_needed, two_batch_trace
    from distrs.sim.report import ebf_markdown, plot_ebf

    try:
        counts = [int(x) for x in gpus.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter("must be integers separated by commas", param_hint="--gpus") from None
    tr = two_batch_trace(_load(trace, None), gap, iteration)
    points = ebf_sweep(tr, counts)
    needed = {str(threshold): gpus_needed(points, threshold)}
    typer.echo(ebf_markdown(points, needed))
    _write_json(json_out, {"points": [p.__dict__ for p in points], "gpus_needed": needed})
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        typer.echo(f"wrote {plot_ebf(points, plot)}")


@app.command("planner-runtime")
def planner_runtime(
    batches: Annotated[
        str, typer.Option(help="Active batch counts (2048 requests each), comma-separated.")
    ] = "1,2,4,8,16,24,32,44",
    repeats: Annotated[int, typer.Option(help="Best of this many runs per point.")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the PNG here.")] = None,
) -> None:
    """Wall time of one ``distrs`` decision vs the number of estimated requests (Fig. 15)."""
    from distrs.scaling.serve_native import ENV, SERVE_LOOPS
    from distrs.sim.experiments import planner_runtime as measure
    from distrs.sim.report import plot_runtime, runtime_markdown

    try:
        counts = [int(x) for x in batches.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter("must be integers separated by commas", param_hint="--batches") from None
    points = measure(counts, repeats)
    typer.echo(runtime_markdown(points))
    typer.echo(f"\nserve loops: {SERVE_LOOPS} ({ENV}=0 forces the Python ones)")
    _write_json(json_out, {"points": [p.__dict__ for p in points], "serve_loops": SERVE_LOOPS})
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        typer.echo(f"wrote {plot_runtime(points, plot)}")
