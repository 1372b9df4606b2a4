"""The Grafana dashboard: every query names a metric the service exports, parses as PromQL, and
uses the namespace/task variables the dashboard defines."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from distrs import dashboards
from distrs.metrics import GPU_GAUGES, Metrics, SessionMetrics, WorkerMetrics
from tests.fixtures.gpu import HEALTHY

METRIC = re.compile(r"\b(distrs_[a-z_]+)")


def exported_names() -> set[str]:
    names = set()
    worker = WorkerMetrics(gpu_read=lambda: [HEALTHY])  # an execute worker's /metrics, fake NVML
    proxy = Metrics()
    SessionMetrics(proxy.registry)  # the proxy's session collectors share its registry
    for family in [*proxy.registry.collect(), *worker.registry.collect()]:
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
    return names


def test_every_query_uses_exported_metrics() -> None:
    exprs = dashboards.expressions(dashboards.build())
    exported = exported_names()
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert used and used <= exported, used - exported
    for family in (
        "distrs_queue_depth",
        "distrs_worker_replicas_desired",
        "distrs_worker_replicas_ready",
        "distrs_worker_seconds_allocated_total",
        "distrs_worker_seconds_busy_total",
        "distrs_batch_extra_delay_seconds_bucket",
        "distrs_batch_estimated_span_seconds",
        "distrs_batch_actual_span_seconds",
        "distrs_stage_run_seconds_bucket",
        "distrs_requests_finished_total",
        "distrs_planner_decision_seconds_bucket",
        "distrs_lease_expiries_total",
        "distrs_lease_releases_total",
        "distrs_request_gpu_seconds_sum",
        "distrs_request_gpu_seconds_bucket",
        "distrs_gpu_healthy",
        "distrs_gpu_health_checks_total",
        *(name for name, _, _ in GPU_GAUGES),
    ):
        assert family in used, f"the dashboard does not show {family}"
    assert any("histogram_quantile(0.99" in e and "extra_delay" in e for e in exprs)
    assert any("histogram_quantile" in e and "stage_run_seconds" in e for e in exprs)


def test_variables_and_layout() -> None:
    d = dashboards.build()
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"namespace", "task", "datasource"} <= names
    for e in dashboards.expressions(d):
        assert 'namespace=~"$namespace"' in e
    task_panels = [e for e in dashboards.expressions(d) if "task" in e and "by (task" in e]
    assert task_panels and all('task=~"$task"' in e for e in task_panels)
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        for dy in range(g["h"]):
            for dx in range(g["w"]):
                cell = (g["x"] + dx, g["y"] + dy)
                assert cell not in cells, f"panel {p['title']} overlaps another"
                cells.add(cell)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_queries_parse_as_promql(tmp_path: Path) -> None:
    """promtool checks each expression as a recording rule (Grafana's variables filled in)."""
    exprs = dashboards.expressions(dashboards.build())
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(exprs):
        filled = e.replace("$namespace", ".*").replace("$task", ".*").replace("$__rate_interval", "1m")
        rules += [f"      - record: distrs:dashboard_{i}", f"        expr: '{filled}'"]
    path = tmp_path / "rules.yml"
    path.write_text("\n".join(rules) + "\n")
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(exprs)} rules found" in out.stdout


def test_built_with_the_grafana_sdk_and_has_a_gpu_row() -> None:
    from grafana_foundation_sdk.builders.dashboard import Dashboard

    assert isinstance(dashboards.builder(), Dashboard)
    d = dashboards.build()
    assert d["schemaVersion"] >= 39 and d["uid"] == dashboards.UID
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows[-1] == "GPU execute workers"
    gpu_at = next(i for i, p in enumerate(d["panels"]) if p["title"] == "GPU execute workers")
    gpu_exprs = [t["expr"] for p in d["panels"][gpu_at + 1 :] for t in p["targets"]]
    assert all("distrs_gpu_" in e or "distrs_request_gpu_seconds" in e for e in gpu_exprs)
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in d["panels"][gpu_at + 1 :]}
    assert units["GPU memory used"] == "bytes" and units["GPU temperature"] == "celsius"
    assert units["GPU clocks"] == "hertz" and units["GPU utilisation"] == "percentunit"
    namespace = next(v for v in d["templating"]["list"] if v["name"] == "namespace")
    assert namespace["query"]["query"] == "label_values(distrs_queue_depth, namespace)"
    assert namespace["allValue"] == ".*" and namespace["multi"] and namespace["includeAll"]
