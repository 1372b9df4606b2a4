"""``distrs trace generate``: write a calibrated synthetic ``distrs-trace/1`` trace.

Every generator parameter (``distrs.sim.generator.GeneratorParams``) can be set with
``--param NAME=VALUE``; the values used are recorded in the meta file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)


def _parse_params(items: list[str]) -> dict[str, Any]:
    from distrs.sim.generator import GeneratorParams

    fields = {f.name: f for f in dataclasses.fields(GeneratorParams)}
    defaults = GeneratorParams()
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in fields:
            raise typer.BadParameter(
                f"{item!r}: expected NAME=VALUE with NAME one of {sorted(fields)}", param_hint="--param"
            )
        current = getattr(defaults, name)
        try:
            if isinstance(current, tuple):
                out[name] = tuple(float(x) for x in raw.split(","))
            elif isinstance(current, bool):
                out[name] = raw.lower() in ("1", "true", "yes")
            else:
                out[name] = type(current)(raw)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: bad value for {name}", param_hint="--param") from None
    return out


@app.command()
def generate(
    out: Annotated[Path, typer.Option("--out", help="Output NAME (writes NAME.csv.gz and NAME.meta.json).")],
    tasks: Annotated[int, typer.Option(min=1, help="Training tasks (tenants).")] = 6,
    iterations: Annotated[int, typer.Option(min=1, help="Batches per task.")] = 50,
    batch: Annotated[int, typer.Option(min=1, help="Requests per batch.")] = 2048,
    mode: Annotated[str, typer.Option(help="colocated | disaggregated")] = "colocated",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
    param: Annotated[
        list[str] | None, typer.Option("--param", help="Any generator parameter, NAME=VALUE.")
    ] = None,
) -> None:
    """Generate a trace calibrated to the DistRS workload study (Sec. 3)."""
    from distrs.sim.generator import GeneratorParams
    from distrs.sim.generator import generate as gen
    from distrs.sim.trace import dump

    if mode not in ("colocated", "disaggregated"):
        raise typer.BadParameter("must be 'colocated' or 'disaggregated'", param_hint="--mode")
    params = GeneratorParams(
        tasks=tasks, iterations=iterations, batch=batch, mode=mode, seed=seed, **_parse_params(param or [])
    )
    csv_path, meta_path = dump(gen(params), out)
    typer.echo(f"wrote {csv_path} and {meta_path} ({tasks * iterations * batch} requests)")
