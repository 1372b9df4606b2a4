"""The Grafana dashboard shipped in the Helm chart, generated from code.

Keeping the panels as data here (instead of hand-editing a 1,000-line JSON file) lets tests check
that every query names a metric :mod:`distrs.metrics` really exports, and lets the Prometheus
integration test run each query against a live scrape. The JSON is built with Grafana's own
Foundation SDK builders (``grafana-foundation-sdk``), so field names, defaults and the schema
version follow Grafana rather than a hand-kept literal; the GPU row reads the execute workers'
own /metrics (``distrs.metrics.WorkerMetrics``). Regenerate the chart's copy with::

    python -m distrs.dashboards deploy/helm/distrs/dashboards/distrs.json

Queries use two template variables, ``$namespace`` and ``$task`` (multi-select, "All" = ``.*``),
and Grafana's ``$__rate_interval``. ``task`` is ``all`` unless the service exports tenant labels
(``distrs.metrics``), so the same queries serve both modes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

UID = "distrs-overview"
NS = 'namespace=~"$namespace"'
NS_TASK = 'namespace=~"$namespace", task=~"$task"'
RATE = "[$__rate_interval]"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")


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
    stack: bool = False


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
    (
        "Sessions",
        (
            Panel(
                "Sessions open",
                "Stateful sessions not ended (docs/sessions.md), opening (a create in flight) and open.",
                (Query(f"sum by (state) (distrs_sessions_open{{{NS}}})", "{{state}}"),),
                stack=True,
            ),
            Panel(
                "Sessions created and ended per second",
                "Creates by language; ends by reason (deleted, idle_timeout, max_lifetime, lost, ...).",
                (
                    Query(
                        f"sum by (language) (rate(distrs_sessions_created_total{{{NS}}}{RATE}))",
                        "created {{language}}",
                    ),
                    Query(
                        f"sum by (reason) (rate(distrs_sessions_ended_total{{{NS}}}{RATE}))",
                        "ended {{reason}}",
                    ),
                ),
                unit="ops",
            ),
            Panel(
                "Exec and create round trip",
                "Quantiles of one exec (submit to answer, at the proxy) and of one create.",
                (
                    *_quantiles("distrs_session_exec_seconds", "language", NS, (0.5, 0.99)),
                    Query(
                        "histogram_quantile(0.99, sum by (le) "
                        f"(rate(distrs_session_create_seconds_bucket{{{NS}}}{RATE})))",
                        "create p99",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Session pool and reclaim",
                "Session workers the planner asks for and those polling (draining ones finish their "
                "sessions); calls waiting and running; sessions the service ended by itself per second.",
                (
                    Query(f"max(distrs_session_pool_desired{{{NS}}})", "desired workers"),
                    Query(
                        f"sum by (draining) (distrs_session_workers{{{NS}}})", "workers draining={{draining}}"
                    ),
                    Query(f"sum by (state) (distrs_session_calls{{{NS}}})", "calls {{state}}"),
                    Query(
                        f"sum by (reason) (rate(distrs_sessions_reclaimed_total{{{NS}}}{RATE}))",
                        "reclaimed {{reason}}",
                    ),
                ),
            ),
        ),
    ),
    (
        "GPU execute workers",
        (
            Panel(
                "GPU utilisation",
                "Fraction of time a kernel ran (and memory was busy) on each execute worker's GPU; "
                "MIG slices report no utilisation.",
                (
                    Query(
                        f"max by (gpu, model) (distrs_gpu_utilization_ratio{{{NS}}})",
                        "SM {{model}} {{gpu}}",
                    ),
                    Query(
                        f"max by (gpu, model) (distrs_gpu_memory_utilization_ratio{{{NS}}})",
                        "memory {{model}} {{gpu}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "GPU memory used",
                "Memory in use on each GPU (or MIG slice) against its size.",
                (
                    Query(f"max by (gpu) (distrs_gpu_memory_used_bytes{{{NS}}})", "used {{gpu}}"),
                    Query(f"max by (gpu) (distrs_gpu_memory_total_bytes{{{NS}}})", "total {{gpu}}"),
                ),
                unit="bytes",
            ),
            Panel(
                "GPU temperature",
                "Core temperature of each GPU; throttling clocks down past the slowdown threshold.",
                (Query(f"max by (gpu) (distrs_gpu_temperature_celsius{{{NS}}})", "{{gpu}}"),),
                unit="celsius",
            ),
            Panel(
                "GPU clocks",
                "Current SM and memory clocks; a falling SM clock under load means throttling, and "
                "noisier kernel timing.",
                (
                    Query(f"max by (gpu) (distrs_gpu_sm_clock_hertz{{{NS}}})", "SM {{gpu}}"),
                    Query(f"max by (gpu) (distrs_gpu_memory_clock_hertz{{{NS}}})", "memory {{gpu}}"),
                ),
                unit="hertz",
            ),
            Panel(
                "GPU power",
                "Board power draw of each GPU.",
                (Query(f"max by (gpu) (distrs_gpu_power_watts{{{NS}}})", "{{gpu}}"),),
                unit="watt",
            ),
            Panel(
                "GPU-seconds per second by reward type",
                "GPU time requests held the execute workers' GPUs (or slices): the costly resource "
                "the planner saves; and the p90 GPU-seconds of one request.",
                (
                    Query(
                        f"sum by (reward_type) (rate(distrs_request_gpu_seconds_sum{{{NS}}}{RATE}))",
                        "{{reward_type}}",
                    ),
                    *_quantiles("distrs_request_gpu_seconds", "reward_type", NS, (0.9,)),
                ),
                unit="s",
            ),
            Panel(
                "GPU health",
                "Execute workers whose GPU passed its last check, of all reporting; and sick "
                "verdicts by trigger (first check, after a CUDA error, re-check of a sick GPU).",
                (
                    Query(f"sum(distrs_gpu_healthy{{{NS}}})", "healthy"),
                    Query(f"count(distrs_gpu_healthy{{{NS}}})", "reporting"),
                    Query(
                        "sum by (trigger) "
                        f'(increase(distrs_gpu_health_checks_total{{{NS}, result="sick"}}{RATE}))',
                        "sick ({{trigger}})",
                    ),
                ),
            ),
        ),
    ),
)


def _variables() -> list[Builder[dm.VariableModel]]:
    def query_var(name: str, label: str, query: str) -> Builder[dm.VariableModel]:
        return (
            db.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query({"query": query, "refId": name})
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .multi(True)
            .all_value(".*")
            .current(dm.VariableOption(text="All", value="$__all"))
        )

    return [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_var("namespace", "Namespace", "label_values(distrs_queue_depth, namespace)"),
        query_var("task", "Task", 'label_values(distrs_queue_depth{namespace=~"$namespace"}, task)'),
    ]


def _panel(pid: int, p: Panel) -> Builder[dm.Panel]:
    panel = (
        timeseries.Panel()
        .id(pid)
        .title(p.title)
        .description(p.description)
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .unit(p.unit)
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL if p.stack else cm.StackingMode.NONE))
        .legend(
            cb.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
    )
    for k, q in enumerate(p.queries):
        panel = panel.with_target(
            prometheus.Dataquery()
            .ref_id(chr(ord("A") + k))
            .datasource(DATASOURCE)
            .expr(q.expr)
            .legend_format(q.legend)
        )
    return panel


def builder() -> db.Dashboard:
    """The dashboard as the Grafana Foundation SDK's builder (rows expanded, two panels a line)."""
    d = (
        db.Dashboard("DistRS reward service")
        .uid(UID)
        .description(
            "Queues, worker scaling, batch delay, planner health, sessions and GPU execute workers of a DistRS release."
        )
        .tags(["distrs", "rl", "autoscaling"])
        .editable()
        .version(1)
        .refresh("30s")
        .time("now-3h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .variables(_variables())
    )
    pid = 1
    for row_title, row in ROWS:
        d = d.with_row(db.Row(row_title).id(pid))
        pid += 1
        for p in row:
            d = d.with_panel(_panel(pid, p))
            pid += 1
    return d


def build() -> dict[str, Any]:
    """The dashboard as Grafana JSON (the SDK's schema version)."""
    out: dict[str, Any] = json.loads(json.dumps(builder().build(), cls=JSONEncoder))
    return out


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
