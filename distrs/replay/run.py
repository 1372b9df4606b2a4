"""``distrs replay`` and the demo: drive a service from a trace with a progress bar."""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from distrs.replay.driver import BatchReport, Replayer
from distrs.replay.report import batch_table, summary_json
from distrs.replay.trace_input import load_batches


def demo_trace() -> Path:
    """The calibrated slice shipped with the package (a few tasks, iterations and requests)."""
    return Path(str(resources.files("distrs.sim").joinpath("data/demo.csv.gz")))


async def replay_async(
    url: str,
    trace: str | Path,
    speedup: float,
    token: str | None = None,
    tasks: int | None = None,
    iterations: int | None = None,
    batch: int | None = None,
    console: Console | None = None,
    stats_url_token: str | None = None,
) -> tuple[dict[str, Any], list[BatchReport], dict[str, float]]:
    console = console or Console()
    meta, batches = load_batches(trace, tasks, iterations, batch)
    stages = [s["name"] for s in meta["stages"]]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    total = sum(len(b.requests) for b in batches)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            reqs = progress.add_task("rewards", total=total)
            bts = progress.add_task("batches", total=len(batches))
            rp = Replayer(
                client,
                batches,
                stages,
                speedup,
                colocated=meta.get("mode", "colocated") == "colocated",
                on_request_done=lambda n: progress.advance(reqs, n),
                on_batch_done=lambda r: progress.advance(bts, 1),
            )
            reports = await rp.run()
        allocated: dict[str, float] = {}
        r = await client.get(
            "/v1/stats", headers={"Authorization": f"Bearer {stats_url_token}"} if stats_url_token else None
        )
        if r.status_code == 200 and r.json().get("last_plan"):
            allocated = r.json()["last_plan"].get("allocated_worker_seconds", {})
    return meta, reports, allocated


def replay_main(
    trace: str | None,
    url: str,
    speedup: float,
    token: str | None,
    tasks: int | None,
    iterations: int | None,
    batch: int | None,
    json_out: str | None,
) -> None:
    console = Console()
    path = trace or demo_trace()
    meta, reports, allocated = asyncio.run(
        replay_async(url, path, speedup, token, tasks, iterations, batch, console, stats_url_token=token)
    )
    stages = [s["name"] for s in meta["stages"]]
    console.print(batch_table(reports, stages, allocated))
    if json_out:
        Path(json_out).write_text(json.dumps(summary_json(reports, stages, allocated, speedup), indent=2))
