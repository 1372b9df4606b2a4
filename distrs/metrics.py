"""Every Prometheus metric of the service, in one place.

``Metrics`` builds its collectors in a registry it is given (no import-time globals), so tests
and several apps in one process never collide. Names follow Prometheus conventions: base units
(seconds), ``_total`` for counters. The Grafana dashboard (deploy/helm/distrs/dashboards) queries
exactly these names. ``WorkerMetrics`` is a worker's own registry (its health port's /metrics):
GPU-seconds per request, GPU health checks and per-GPU gauges read from NVML at scrape time.

Task labels: by default the ``task`` label of every metric is ``all`` (values of all tasks summed
up), so a scrape names no tenant and no task; with ``tenant_labels`` (``DISTRS_METRICS_TENANT_LABELS``)
it is the store's ``TENANT/TASK`` name. The label set is the same either way, so dashboards work
with both. The mapping sits here, in ``TaskLabelled``, so no caller can leak a name by forgetting it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

ALL_TASKS = "all"
C = TypeVar("C", Counter, Gauge, Histogram)


class TaskLabelled(Generic[C]):
    """A collector with a ``task`` label at position ``task_at``: ``labels(...)`` maps the task
    to ``ALL_TASKS`` unless tenant labels are on. Everything else is the collector's own."""

    def __init__(self, inner: C, tenant_labels: bool, task_at: int = 0) -> None:
        self.inner: C = inner
        self.tenant_labels, self.task_at = tenant_labels, task_at

    def labels(self, *values: str) -> Any:
        vals = list(values)
        if not self.tenant_labels:
            vals[self.task_at] = ALL_TASKS
        return self.inner.labels(*vals)

    def clear(self) -> None:
        self.inner.clear()


STAGE_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 180, 300)
DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
DECISION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)


class Metrics:
    """The collectors. Proxy and planner each build one over their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None, tenant_labels: bool = False) -> None:
        self.registry = registry or CollectorRegistry()
        self.tenant_labels = tenant_labels
        self._stage_children: dict[str, tuple[Any, Any, Any]] = {}
        self._finished_children: dict[tuple[str, str], Any] = {}
        r = self.registry
        self.queue_depth = TaskLabelled(
            Gauge("distrs_queue_depth", "Requests waiting per stage and task", ["stage", "task"], registry=r),
            tenant_labels,
            task_at=1,
        )
        self.leases_in_flight = Gauge(
            "distrs_leases_in_flight", "Leases held by workers per stage", ["stage"], registry=r
        )
        self.replicas_desired = Gauge(
            "distrs_worker_replicas_desired", "Worker replicas the planner wants", ["stage"], registry=r
        )
        self.replicas_ready = Gauge(
            "distrs_worker_replicas_ready", "Worker replicas ready per the actuator", ["stage"], registry=r
        )
        self.stage_run_seconds = Histogram(
            "distrs_stage_run_seconds",
            "Time a request ran at a stage",
            ["stage"],
            buckets=STAGE_SECONDS_BUCKETS,
            registry=r,
        )
        self.stage_queue_seconds = Histogram(
            "distrs_stage_queue_seconds",
            "Time a request waited in a stage queue",
            ["stage"],
            buckets=STAGE_SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_extra_delay = TaskLabelled(
            Histogram(
                "distrs_batch_extra_delay_seconds",
                "Extra delay d of a completed batch: completion minus earliest possible completion T",
                ["task"],
                buckets=DELAY_BUCKETS,
                registry=r,
            ),
            tenant_labels,
        )
        self.batch_estimated_span = TaskLabelled(
            Gauge(
                "distrs_batch_estimated_span_seconds",
                "Estimated T of the task's latest batch, seconds after its anchor",
                ["task"],
                registry=r,
            ),
            tenant_labels,
        )
        self.batch_actual_span = TaskLabelled(
            Gauge(
                "distrs_batch_actual_span_seconds",
                "Actual completion of the task's latest finished batch, seconds after its anchor",
                ["task"],
                registry=r,
            ),
            tenant_labels,
        )
        self.lease_expiries = Counter(
            "distrs_lease_expiries_total", "Leases that expired and were requeued", ["stage"], registry=r
        )
        self.lease_releases = Counter(
            "distrs_lease_releases_total",
            "Leases given back unworked by workers told to stop (requeued at their place)",
            ["stage"],
            registry=r,
        )
        self.requests_submitted = Counter(
            "distrs_requests_submitted_total", "Requests accepted", ["reward_type"], registry=r
        )
        self.requests_finished = Counter(
            "distrs_requests_finished_total",
            "Requests by final status",
            ["reward_type", "status"],
            registry=r,
        )
        self.worker_seconds_allocated = Counter(
            "distrs_worker_seconds_allocated_total",
            "Worker-seconds allocated (replicas x time) per stage",
            ["stage"],
            registry=r,
        )
        self.worker_seconds_busy = Counter(
            "distrs_worker_seconds_busy_total", "Worker-seconds spent running requests", ["stage"], registry=r
        )
        self.planner_decision_seconds = Histogram(
            "distrs_planner_decision_seconds",
            "Wall time of one scaling decision",
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        # Per batch, so only exported with tenant labels (``Planner.decide``); an "all" series
        # of per-batch values would mean nothing.
        self.planner_estimated_completion = Gauge(
            "distrs_planner_batch_estimated_completion_timestamp_seconds",
            "The planner's estimated earliest completion T (Eq. 1-2) of each active batch, Unix time",
            ["task", "batch_id"],
            registry=r,
        )
        # Per tenant: set (at scrape) only with tenant labels, so an open /metrics names no tenant.
        self.tenant_queued = Gauge(
            "distrs_tenant_queued_requests",
            "Requests of the tenant submitted and not yet finished (its max_queued quota's usage)",
            ["tenant"],
            registry=r,
        )
        self.tenant_result_bytes = Gauge(
            "distrs_tenant_result_bytes",
            "JSON bytes of the tenant's finished results kept in the store (max_result_bytes' usage)",
            ["tenant"],
            registry=r,
        )
        self.planner_errors = Counter(
            "distrs_planner_errors_total",
            "Planner decisions that failed (store unreachable, ...) and were retried",
            ["reason"],
            registry=r,
        )
        self.planner_decisions = Counter(
            "distrs_planner_decisions_total", "Scaling decisions made", ["trigger"], registry=r
        )
        self.actuator_errors = Counter(
            "distrs_actuator_errors_total", "Actuator calls that failed", ["stage", "reason"], registry=r
        )

    def stage_children(self, stage: str) -> tuple[Any, Any, Any]:
        """The run-time and queue-time histograms and the busy-seconds counter of ``stage``, looked
        up once per stage: every completion records all three, and ``labels()`` takes a lock and
        builds a key each call. These collectors are never cleared, so the children stay valid."""
        got = self._stage_children.get(stage)
        if got is None:
            got = (
                self.stage_run_seconds.labels(stage),
                self.stage_queue_seconds.labels(stage),
                self.worker_seconds_busy.labels(stage),
            )
            self._stage_children[stage] = got
        return got

    def finished_child(self, reward_type: str, status: str) -> Any:
        """The ``requests_finished`` counter of (``reward_type``, ``status``), looked up once (as
        ``stage_children``: a few reward types times seven statuses, never cleared)."""
        key = (reward_type, status)
        got = self._finished_children.get(key)
        if got is None:
            got = self._finished_children[key] = self.requests_finished.labels(reward_type, status)
        return got


# GPU gauges of an execute worker: (metric name, GpuState attribute, help). Read from NVML at
# scrape time by ``GpuCollector``; a value NVML does not give on this GPU is left out.
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("distrs_gpu_utilization_ratio", "utilization", "Fraction of time a kernel ran on the GPU (NVML)"),
    (
        "distrs_gpu_memory_utilization_ratio",
        "memory_utilization",
        "Fraction of time GPU memory was read or written (NVML)",
    ),
    ("distrs_gpu_memory_used_bytes", "memory_used_bytes", "GPU memory in use"),
    ("distrs_gpu_memory_total_bytes", "memory_total_bytes", "GPU memory in all"),
    ("distrs_gpu_temperature_celsius", "temperature_c", "GPU core temperature"),
    ("distrs_gpu_sm_clock_hertz", "sm_clock_hz", "Current SM clock"),
    ("distrs_gpu_memory_clock_hertz", "memory_clock_hz", "Current memory clock"),
    ("distrs_gpu_power_watts", "power_w", "Power draw of the GPU board"),
)
GPU_LABELS = ("gpu", "model")  # gpu: the GPU's or MIG slice's UUID; bounded by the hardware


class GpuCollector:
    """Per-GPU gauges read at scrape time from ``read()`` (objects with ``GpuState``'s fields:
    ``uuid``, ``name`` and the attributes of ``GPU_GAUGES``). A failing read yields no samples
    (the health check reports the failure; a scrape must not)."""

    def __init__(self, read: Callable[[], Iterable[Any]]) -> None:
        self._read = read

    def describe(self) -> Iterator[Metric]:
        for name, _, doc in GPU_GAUGES:
            yield GaugeMetricFamily(name, doc, labels=GPU_LABELS)

    def collect(self) -> Iterator[Metric]:
        try:
            states = list(self._read())
        except Exception:
            states = []
        for name, attr, doc in GPU_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for s in states:
                value = getattr(s, attr, None)
                if value is not None:
                    family.add_metric([str(s.uuid), str(s.name)], float(value))
            yield family


class WorkerMetrics:
    """A worker's own /metrics (``distrs worker --health-port``): GPU-seconds per request, the
    GPU health checks, and with ``gpu_read`` the per-GPU gauges. Labels are bounded: reward types
    are the registered ones, triggers and results fixed words."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        gpu_read: Callable[[], Iterable[Any]] | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.request_gpu_seconds = Histogram(
            "distrs_request_gpu_seconds",
            "GPU-seconds one request held this worker's GPU (or MIG slice), by reward type",
            ["reward_type"],
            buckets=STAGE_SECONDS_BUCKETS,
            registry=r,
        )
        self.gpu_health_checks = Counter(
            "distrs_gpu_health_checks_total",
            "GPU health checks by trigger (first, cuda_error, recheck) and result (healthy, sick)",
            ["trigger", "result"],
            registry=r,
        )
        self.gpu_healthy = Gauge(
            "distrs_gpu_healthy", "1 while the last GPU health check passed, else 0", registry=r
        )
        if gpu_read is not None:
            r.register(GpuCollector(gpu_read))  # type: ignore[arg-type]


SESSION_SECONDS_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


class SessionMetrics:
    """The collectors of stateful sessions (docs/sessions.md), in the registry of the proxy's
    ``Metrics`` (one ``/metrics``) or the planner's. Gauges are set from the store's view at every
    sweep; counters and histograms as calls happen. No label names a tenant or a session."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.open = Gauge(
            "distrs_sessions_open", "Sessions not ended, by state (opening, open)", ["state"], registry=r
        )
        self.created = Counter(
            "distrs_sessions_created_total", "Sessions opened, by language", ["language"], registry=r
        )
        self.ended = Counter(
            "distrs_sessions_ended_total",
            "Sessions ended, by reason (core.sessions.EndReason)",
            ["reason"],
            registry=r,
        )
        self.reclaimed = Counter(
            "distrs_sessions_reclaimed_total",
            "Sessions the service ended by itself (idle_timeout, max_lifetime, lost, create_timeout)",
            ["reason"],
            registry=r,
        )
        self.exec_seconds = Histogram(
            "distrs_session_exec_seconds",
            "Round trip of one exec at the proxy (submit to answer)",
            ["language"],
            buckets=SESSION_SECONDS_BUCKETS,
            registry=r,
        )
        self.create_seconds = Histogram(
            "distrs_session_create_seconds",
            "Round trip of one session create at the proxy",
            buckets=SESSION_SECONDS_BUCKETS,
            registry=r,
        )
        self.calls = Gauge(
            "distrs_session_calls", "Session calls by state (queued, running)", ["state"], registry=r
        )
        self.workers = Gauge(
            "distrs_session_workers", "Session workers polling, by draining", ["draining"], registry=r
        )
        self.pool_desired = Gauge(
            "distrs_session_pool_desired", "Session workers the planner asks for", registry=r
        )
        for reason in ("idle_timeout", "max_lifetime", "lost", "create_timeout"):
            self.reclaimed.labels(reason)
        for state in ("opening", "open"):
            self.open.labels(state)
