"""The Grafana dashboard shipped in the Helm chart, generated from code.

Keeping the panels as data here (instead of hand-editing a 1,000-line JSON file) lets tests check
that every query names a metric :mod:`distrs.metrics` really exports, and lets the Prometheus
integration test run each query against a live scrape. Regenerate the chart's copy with::

    python -m distrs.dashboards deploy/helm/distrs/dashboards/distrs.json

Queries use two template variables, ``$namespace`` and ``$task`` (multi-select, "All" = ``.*``),
and Grafana's ``$__rate_interval``. ``task`` is ``all`` unless the service exports tenant labels
(``distrs.metrics``), so the same queries serve both modes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

UID = "distrs-overview"
NS = 'namespace=~"$namespace"'
NS_TASK = 'namespace=~"$namespace", task=~"$task"'
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    stack: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _quantiles(metric: str, by: str, sel: str, qs: tuple[float, ...]) -> tuple[Query, ...]:
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{sel}}}{RATE})))",
            f"p{round(q * 100)} {{{{{by}}}}}",
        )
        for q in qs
    )


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Queues and workers",
        (
            Panel(
                "Queue depth per stage and task",
                "Requests waiting in each stage's EBF queue, by task.",
                (Query(f"sum by (stage, task) (distrs_queue_depth{{{NS_TASK}}})", "{{stage}} / {{task}}"),),
                stack=True,
            ),
            Panel(
                "Worker replicas: desired vs ready",
                "What the planner asked for (N_j) and what the actuator reports ready, per stage.",
                (
                    Query(f"max by (stage) (distrs_worker_replicas_desired{{{NS}}})", "desired {{stage}}"),
                    Query(f"max by (stage) (distrs_worker_replicas_ready{{{NS}}})", "ready {{stage}}"),
                ),
            ),
            Panel(
                "Worker-seconds: allocated vs busy",
                "Allocated (replicas x time) against time spent running requests; the gap is idle cost.",
                (
                    Query(
                        f"sum by (stage) (rate(distrs_worker_seconds_allocated_total{{{NS}}}{RATE}))",
                        "allocated {{stage}}",
                    ),
                    Query(
                        f"sum by (stage) (rate(distrs_worker_seconds_busy_total{{{NS}}}{RATE}))",
                        "busy {{stage}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Leases in flight",
                "Requests being run by a worker right now, per stage.",
                (Query(f"sum by (stage) (distrs_leases_in_flight{{{NS}}})", "{{stage}}"),),
            ),
        ),
    ),
    (
        "Batches",
        (
            Panel(
                "Batch extra delay: mean and p99",
                "d = completion - earliest possible completion T (DistRS Eq. 1-2), per task.",
                (
                    Query(
                        f"sum by (task) (rate(distrs_batch_extra_delay_seconds_sum{{{NS_TASK}}}{RATE}))"
                        f" / sum by (task) (rate(distrs_batch_extra_delay_seconds_count{{{NS_TASK}}}{RATE}))",
                        "mean {{task}}",
                    ),
                    *_quantiles("distrs_batch_extra_delay_seconds", "task", NS_TASK, (0.99,)),
                ),
                unit="s",
            ),
            Panel(
                "Batch completion: estimated T vs actual",
                "Estimated earliest completion of the latest batch against when the last one really finished.",
                (
                    Query(
                        f"max by (task) (distrs_batch_estimated_span_seconds{{{NS_TASK}}})",
                        "estimated {{task}}",
                    ),
                    Query(
                        f"max by (task) (distrs_batch_actual_span_seconds{{{NS_TASK}}})", "actual {{task}}"
                    ),
                ),
                unit="s",
            ),
        ),
    ),
    (
        "Stages and outcomes",
        (
            Panel(
                "Stage run time quantiles",
                "Time a request ran at each stage (p50/p90/p99).",
                _quantiles("distrs_stage_run_seconds", "stage", NS, (0.5, 0.9, 0.99)),
                unit="s",
            ),
            Panel(
                "Stage queue wait p90",
                "Time a request waited in each stage queue.",
                _quantiles("distrs_stage_queue_seconds", "stage", NS, (0.9,)),
                unit="s",
            ),
            Panel(
                "Timeouts and failures by status",
                "Finished requests per second whose status is not ok (timeout, compile_error, ...).",
                (
                    Query(
                        f'sum by (status) (rate(distrs_requests_finished_total{{{NS}, status!="ok"}}{RATE}))',
                        "{{status}}",
                    ),
                ),
                unit="reqps",
                stack=True,
            ),
            Panel(
                "Requests finished by status",
                "All finished requests per second by status and reward type.",
                (
                    Query(
                        f"sum by (reward_type, status) (rate(distrs_requests_finished_total{{{NS}}}{RATE}))",
                        "{{reward_type}} {{status}}",
                    ),
                ),
                unit="reqps",
            ),
        ),
    ),
    (
        "Planner",
        (
            Panel(
                "Planner decision time",
                "Wall time of one scaling decision (Alg. 1 + Alg. 2): mean and p99.",
                (
                    Query(
                        f"sum(rate(distrs_planner_decision_seconds_sum{{{NS}}}{RATE}))"
                        f" / sum(rate(distrs_planner_decision_seconds_count{{{NS}}}{RATE}))",
                        "mean",
                    ),
                    Query(
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(distrs_planner_decision_seconds_bucket{{{NS}}}{RATE})))",
                        "p99",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Lease expiries and give-backs",
                "Worker leases that expired and were requeued (a worker died or stalled), and leases "
                "given back unworked by workers told to stop (scale-downs).",
                (
                    Query(
                        f"sum by (stage) (increase(distrs_lease_expiries_total{{{NS}}}{RATE}))",
                        "expired {{stage}}",
                    ),
                    Query(
                        f"sum by (stage) (increase(distrs_lease_releases_total{{{NS}}}{RATE}))",
                        "given back {{stage}}",
                    ),
                ),
            ),
        ),
    ),
)


def _variables() -> list[dict[str, Any]]:
    ds = {"type": "prometheus", "uid": "${datasource}"}
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
        {
            "name": "namespace",
            "label": "Namespace",
            "type": "query",
            "datasource": ds,
            "query": {"query": "label_values(distrs_queue_depth, namespace)", "refId": "ns"},
            "definition": "label_values(distrs_queue_depth, namespace)",
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
        },
        {
            "name": "task",
            "label": "Task",
            "type": "query",
            "datasource": ds,
            "query": {
                "query": 'label_values(distrs_queue_depth{namespace=~"$namespace"}, task)',
                "refId": "task",
            },
            "definition": 'label_values(distrs_queue_depth{namespace=~"$namespace"}, task)',
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"text": "All", "value": "$__all"},
        },
    ]


def build() -> dict[str, Any]:
    """The dashboard as Grafana JSON (schemaVersion 39)."""
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, row in ROWS:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            }
        )
        pid, y = pid + 1, y + 1
        for i, p in enumerate(row):
            x = 0 if i % 2 == 0 else 12
            panels.append(
                {
                    "id": pid,
                    "type": p.kind,
                    "title": p.title,
                    "description": p.description,
                    "datasource": ds,
                    "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                    "fieldConfig": {
                        "defaults": {
                            "unit": p.unit,
                            "custom": {"stacking": {"mode": "normal" if p.stack else "none"}},
                        },
                        "overrides": [],
                    },
                    "options": {
                        "legend": {
                            "displayMode": "table",
                            "placement": "bottom",
                            "calcs": ["lastNotNull", "max"],
                        }
                    },
                    "targets": [
                        {
                            "refId": chr(ord("A") + k),
                            "datasource": ds,
                            "expr": q.expr,
                            "legendFormat": q.legend,
                        }
                        for k, q in enumerate(p.queries)
                    ],
                    **p.extra,
                }
            )
            pid += 1
            if i % 2 == 1:
                y += 8
        if len(row) % 2 == 1:
            y += 8
    return {
        "uid": UID,
        "title": "DistRS reward service",
        "description": "Queues, worker scaling, batch delay and planner health of a DistRS release.",
        "tags": ["distrs", "rl", "autoscaling"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "graphTooltip": 1,
        "templating": {"list": _variables()},
        "annotations": {"list": []},
        "panels": panels,
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression in a dashboard's panels."""
    return [t["expr"] for p in dashboard.get("panels", []) for t in p.get("targets", []) if t.get("expr")]


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if len(argv) > 1:
        with open(argv[1], "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
