"""``distrs placement plan|render``: plan trainer placement and render KubeRay manifests.

``plan`` runs one scheduler on a cluster spec and a workflow spec and prints the plan summary
(optionally writing the plan JSON and a picture); ``render`` turns a plan JSON into a
``RayJob`` + ``ConfigMap`` (YAML) wired to the DistRS reward service.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from distrs.placement import report
from distrs.placement.specs import SpecError, load_cluster, load_workflow

app = typer.Typer(
    help="Trainer placement on heterogeneous GPUs (HetRL, AReaL-Hex, Espresso).", no_args_is_help=True
)


def _print_summary(doc: dict[str, Any], console: Console) -> None:
    table = Table(title=f"{doc['algorithm']} plan for {doc['workflow']['name']} on {doc['cluster']}")
    for h in report.SUMMARY_HEADER:
        table.add_column(h)
    for row in report.summary_rows(doc):
        table.add_row(*row)
    console.print(table)
    console.print(
        f"iteration {doc['iteration_time_s']:.2f} s · {doc['throughput_tokens_s']:.0f} tokens/s · "
        f"${doc['cost_per_hour']:.2f}/h on {doc['num_gpus_used']} GPUs · search {doc['search_s']:.2f} s"
    )


@app.command()
def plan(
    cluster: Path = typer.Option(..., "--cluster", exists=True, dir_okay=False, help="Cluster spec YAML."),
    workflow: Path = typer.Option(..., "--workflow", exists=True, dir_okay=False, help="Workflow spec YAML."),
    algorithm: str = typer.Option("hetrl", "--algorithm", help="|".join(report.ALGORITHMS)),
    budget_s: float = typer.Option(
        60.0, "--budget-s", min=0.1, help="Search budget (HetRL SHA-EA wall clock, ILP time limit)."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the plan JSON here."),
    png: Path | None = typer.Option(None, "--png", help="Write a picture of the placement here."),
    seed: int = typer.Option(0, "--seed"),
    quiet: bool = typer.Option(False, "--quiet", help="No summary table."),
) -> None:
    """Plan the placement of an RL trainer on a cluster."""
    console = Console()
    try:
        cluster_spec = load_cluster(cluster)
        wf = load_workflow(workflow)
        doc = report.run(cluster_spec, wf, algorithm, budget_s=budget_s, seed=seed)
    except (SpecError, report.PlanningError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if png is not None:
        from distrs.placement.picture import draw

        draw(doc, cluster_spec, png)
    if not quiet:
        _print_summary(doc, console)


@app.command()
def render(
    plan_file: Path = typer.Argument(
        ..., exists=True, dir_okay=False, metavar="PLAN", help="Plan JSON from `plan --json`."
    ),
    reward_url: str = typer.Option(..., "--reward-url", help="URL of the DistRS reward service."),
    cluster: Path = typer.Option(
        ..., "--cluster", exists=True, dir_okay=False, help="Cluster spec the plan was made for."
    ),
    namespace: str = typer.Option("default", "--namespace"),
    image: str = typer.Option("verlai/verl:latest", "--image"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the manifests here (default: stdout)."),
) -> None:
    """Render a plan into a KubeRay RayJob and a ConfigMap (YAML)."""
    from distrs.placement.manifests import render as render_manifests

    console = Console(stderr=True)
    try:
        doc = json.loads(plan_file.read_text())
        cluster_spec = load_cluster(cluster)
        manifests = render_manifests(doc, cluster_spec, reward_url, namespace=namespace, image=image)
    except (json.JSONDecodeError, KeyError, SpecError) as exc:
        console.print(f"[red]error:[/red] {plan_file}: {exc}")
        raise typer.Exit(2) from exc
    text = yaml.safe_dump_all(manifests, sort_keys=False)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
