"""What every part of the prepared GPU check shares: the context a check gets, the runner that
keeps going when a check fails, the statistics, and the JSON report.

A check is ``def my_check(ctx: Ctx) -> dict`` returning at least ``{"ok": bool}`` plus whatever
it measured. A check that raises is reported as failed with the error and the others still run;
once the run's time is spent the remaining checks are reported as skipped, so a slow step costs
the figures after it, never the report.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPORT_FORMAT = "distrs-gpu-check/2"


@dataclass
class Ctx:
    """What a check gets: the service, the GPU worker's health port, the clock and the deadline."""

    url: str
    gpu_url: str
    deadline: float
    work: Path
    client: httpx.Client
    clock: Callable[[], float] = time.monotonic
    shared: dict[str, Any] = field(default_factory=dict)

    def left_s(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def submit(
        self, items: list[tuple[str, dict[str, Any]]], wait_s: float, *, partial: bool = False
    ) -> list[dict[str, Any]]:
        """Score one batch of (reward_type, payload); the results in submission order. A batch
        not complete in ``wait_s`` raises, or with ``partial`` gives the results it has and
        ``{"status": "unfinished"}`` for the others."""
        task, batch = "gpu-check", uuid.uuid4().hex[:8]
        r = self.client.post("/v1/batches", json={"task": task, "batch_id": batch, "size": len(items)})
        r.raise_for_status()
        reqs = [
            {"task": task, "batch_id": batch, "request_id": f"{batch}-{i}", "reward_type": rt, "payload": p}
            for i, (rt, p) in enumerate(items)
        ]
        self.client.post("/v1/requests", json={"requests": reqs}).raise_for_status()
        end = self.clock() + min(wait_s, self.left_s())
        body: dict[str, Any] = {}
        while self.clock() < end:
            body = self.client.get(f"/v1/batches/{task}/{batch}/results", params={"wait_s": 5}).json()
            if body.get("complete"):
                break
        else:
            if not partial:
                raise TimeoutError(f"batch {batch} incomplete after {wait_s:g} s: {body}")
        return in_order(batch, len(items), body.get("results") or [])


def in_order(batch: str, n: int, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch's results in submission order, ``{"status": "unfinished"}`` where one is missing."""
    by_id = {r.get("request_id"): r for r in results}
    return [
        by_id.get(f"{batch}-{i}", {"request_id": f"{batch}-{i}", "status": "unfinished"}) for i in range(n)
    ]


Check = Callable[[Ctx], dict[str, Any]]


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample stdev / mean); None below two values or a zero mean."""
    if len(values) < 2 or statistics.mean(values) == 0:
        return None
    return statistics.stdev(values) / statistics.mean(values)


def spread(values: list[float]) -> dict[str, Any]:
    """Mean, coefficient of variation and the values themselves."""
    return {"mean": statistics.mean(values) if values else None, "cv": cv(values), "values": values}


def stage_seconds(result: dict[str, Any], stage: str) -> float | None:
    """The wall time of one stage of a result (``stages[].run_s``)."""
    for s in result.get("stages") or []:
        if s.get("name") == stage and isinstance(s.get("run_s"), (int, float)):
            return float(s["run_s"])
    return None


def run_checks(checks: list[tuple[str, Check]], ctx: Ctx) -> list[dict[str, Any]]:
    """Each check's result with its name and time (see the module docstring)."""
    out = []
    for name, check in checks:
        t0 = ctx.clock()
        if ctx.left_s() <= 0:
            out.append({"name": name, "ok": False, "skipped": "time budget spent", "seconds": 0.0})
            continue
        try:
            res = dict(check(ctx))
            res.setdefault("ok", False)
        except Exception as exc:  # a failed check is a finding, not the end of the run
            res = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.append({"name": name, **res, "seconds": round(ctx.clock() - t0, 3)})
        print(
            f"[gpu-check] {name}: {'ok' if res['ok'] else 'FAILED'} ({out[-1]['seconds']:.1f} s)",
            file=sys.stderr,
        )
    return out


def parse_junit(path: Path | None) -> dict[str, Any] | None:
    """Counts and per-test outcomes of a pytest JUnit XML file (None without one)."""
    if path is None or not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = []
    for case in (c for s in suites for c in s.iter("testcase")):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                reason = (el.get("message") or "")[:300]
                break
        else:
            reason = ""
        row = {
            "test": f"{case.get('classname')}::{case.get('name')}",
            "outcome": outcome,
            "seconds": float(case.get("time") or 0),
        }
        if reason:
            row["reason"] = reason
        cases.append(row)
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    return {**counts, "tests": cases}


def tier_ok(part: dict[str, Any]) -> bool:
    """A part of the GPU test tier passed: pytest exited 0 and ran at least one test (a tier
    whose GPU tests all skipped proved nothing)."""
    return part.get("rc") == 0 and (part.get("junit") or {}).get("passed", 0) > 0


def build_report(
    checks: list[dict[str, Any]],
    test_gpu: list[dict[str, Any]] | None,
    install: dict[str, Any] | None,
    started: float,
    finished: float,
    build: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole run's report; ``ok`` when every check, every test-tier part and the build passed."""
    ok = all(c["ok"] for c in checks)
    if test_gpu is not None:
        ok = ok and bool(test_gpu) and all(tier_ok(p) for p in test_gpu)
    if build is not None:
        ok = ok and bool(build.get("ok"))
    return {
        "format": REPORT_FORMAT,
        "ok": ok,
        "started_unix": round(started, 3),
        "seconds": round(finished - started, 3),
        "install": install,
        "build": build,
        "test_gpu": test_gpu,
        "checks": checks,
        "failed": [c["name"] for c in checks if not c["ok"]]
        + [f"test_gpu:{p.get('name')}" for p in test_gpu or [] if not tier_ok(p)]
        + (["build"] if build is not None and not build.get("ok") else []),
        **(extra or {}),
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def default_report_path() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu-check.json" if out else Path("gpu-check.json")
