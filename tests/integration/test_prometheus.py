"""Every PromQL expression of the Grafana dashboard returns data from a real Prometheus.

A real ``prometheus`` (the Debian package) scrapes a live proxy (with real workers), a live
``distrs planner`` process, both over a real redis-server, and an execute worker's /metrics over a
fake NVML (the GPU row), while a short synthetic replay runs:
three batches of one task (some requests failing at compile), each followed by a session opened,
used and deleted (the planner starts the session pool for the first), plus one request whose
lease a "ghost" worker takes and abandons so a lease expires. Each dashboard expression is then run as a
range query over the replay window, with the dashboard's variables filled in the way Grafana
would, and must give at least one finite value.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from distrs import dashboards
from tests.fixtures.service import TOKENS, WORKER, free_port, running_service, stop_process, wait_http

METRICS_TOKEN = "metrics-scrape-token"

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NAMESPACE = "distrs-test"

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="prometheus binary not installed"),
    pytest.mark.timeout(120),
    pytest.mark.slow,  # ~30 s: five processes start, three batches 2 s apart, a 5 s lease expiry
]


@contextlib.contextmanager
def prometheus(targets: dict[str, str], tokens: dict[str, str] | None = None) -> Iterator[str]:
    """Prometheus on an ephemeral port scraping ``targets`` (job -> host:port) every second; a
    job in ``tokens`` sends that bearer token, read from a file as from a mounted Secret."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="distrs-prom-") as tmp:
        auth = {}
        for job, token in (tokens or {}).items():
            (Path(tmp) / f"{job}.token").write_text(token)
            auth[job] = f"""
    authorization: {{type: Bearer, credentials_file: {Path(tmp) / f"{job}.token"}}}"""
        jobs = "".join(
            f"""
  - job_name: {job}{auth.get(job, "")}
    static_configs:
      - targets: ["{target}"]
        labels: {{namespace: {NAMESPACE}}}"""
            for job, target in targets.items()
        )
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:{jobs}\n")
        log = open(Path(tmp) / "prometheus.log", "wb")  # noqa: SIM115  (closed below)
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{url}/-/ready", timeout_s=30, proc=proc)
            yield url
        finally:
            stop_process(proc, 10)
            log.close()


@contextlib.contextmanager
def planner_process(redis_url: str, proxy_url: str, metrics_port: int, workdir: Path) -> Iterator[None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
    env.update(
        {
            "DISTRS_METRICS_PORT": str(metrics_port),
            "DISTRS_POLICY": "static",  # no local workers of its own: the fixture's workers serve
            "DISTRS_STATIC_REPLICAS": "0",
            "DISTRS_INTERVAL_S": "1",
            "PYTHONUNBUFFERED": "1",
            # the session pool's host, which the planner's local actuator starts for the replay's
            # sessions, authenticates with the worker token it inherits
            "DISTRS_TOKEN": WORKER,
        }
    )
    log = open(workdir / "planner.log", "wb")  # noqa: SIM115
    cmd = [sys.executable, "-m", "distrs.cli", "planner", "--redis", redis_url, "--actuator", "local"]
    proc = subprocess.Popen([*cmd, "--proxy", proxy_url], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/metrics", timeout_s=30, proc=proc)
        yield
    finally:
        stop_process(proc, 15)
        log.close()


def replay(client: httpx.Client, ghost: httpx.Client) -> None:
    """Three batches of task-a (ok and compile_error results) and an abandoned lease on task-b.

    Batches are 2 s apart so Prometheus scrapes between them: a counter or histogram series is
    born at its first observation, and rate() needs a later increase to be non-zero.
    """
    client.post("/v1/batches", json={"task": "task-b", "batch_id": "b0", "size": 1, "reward_type": "math"})
    r = client.post(
        "/v1/requests",
        json={
            "task": "task-b",
            "batch_id": "b0",
            "request_id": "m0",
            "reward_type": "math",
            "payload": {"completion": "The answer is $4$.", "ground_truth": "4"},
        },
    )
    assert r.status_code == 202, r.text
    lease = ghost.post("/v1/leases", json={"stage": "verify", "worker_id": "ghost-1", "wait_s": 5})
    assert lease.status_code == 200, lease.text  # taken and never heartbeated: it will expire

    for b in range(3):
        if b:
            time.sleep(2.0)
        batch = f"b{b}"
        r = client.post(
            "/v1/batches", json={"task": "task-a", "batch_id": batch, "size": 8, "reward_type": "synthetic"}
        )
        assert r.status_code in (200, 201), r.text
        requests = [
            {
                "task": "task-a",
                "batch_id": batch,
                "request_id": f"{batch}-r{i}",
                "reward_type": "synthetic",
                "payload": {
                    "durations": {"compile": 0.05 + 0.02 * i, "execute": 0.1},
                    "fail_stage": "compile" if i % 4 == 3 else None,
                    "status": "compile_error" if i % 4 == 3 else "ok",
                },
            }
            for i in range(8)
        ]
        r = client.post("/v1/requests", json={"requests": requests})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = client.get(f"/v1/batches/task-a/{batch}/results", params={"wait_s": 5})
            assert r.status_code == 200, r.text
            if r.json()["complete"]:
                break
        else:
            raise AssertionError(f"batch {batch} did not complete")
        statuses = sorted(x["status"] for x in r.json()["results"])
        assert statuses.count("compile_error") == 2 and statuses.count("ok") == 6
        session(client)


def session(client: httpx.Client) -> None:
    """One session per batch (its pool started by the planner on the first): open, exec, delete."""
    r = client.post("/v1/sessions", json={"task": "task-a", "language": "python"}, timeout=90)
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    r = client.post(f"/v1/sessions/{sid}/exec", json={"code": "6 * 7"})
    assert r.json()["value"] == "42", r.text
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204


@contextlib.contextmanager
def gpu_worker_metrics() -> Iterator[str]:
    """An execute worker's /metrics (the real ``WorkerMetrics`` behind the real health server) over
    a fake NVML, while requests keep finishing on it and a health check finds the GPU sick once;
    yields host:port. A real GPU is not needed for the GPU row's queries to be checked."""
    from distrs.metrics import WorkerMetrics
    from distrs.worker.health import serve_health
    from tests.fixtures.gpu import FakeNvml

    nvml = FakeNvml()
    m = WorkerMetrics(gpu_read=lambda: [nvml.read(None)])
    m.gpu_health_checks.labels("first", "healthy").inc()
    m.gpu_healthy.set(1)
    server = serve_health(0, lambda: (True, ""), host="127.0.0.1", registry=m.registry)
    stop = threading.Event()

    def requests() -> None:
        n = 0
        while not stop.wait(0.5):
            n += 1
            m.request_gpu_seconds.labels("cuda").observe(0.2 + 0.01 * (n % 7))
            nvml.set(utilization=(n % 10) / 10, temperature_c=40.0 + n % 5)
            if n % 4 == 0:
                m.gpu_health_checks.labels("cuda_error", "sick" if n % 8 == 0 else "healthy").inc()

    t = threading.Thread(target=requests, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        t.join(5)
        server.shutdown()


def fill(expr: str) -> str:
    return expr.replace("$namespace", NAMESPACE).replace("$task", ".*").replace("$__rate_interval", "15s")


def has_data(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(v)) for series in result for _, v in series.get("values", []))


def missing_data(prom: str, exprs: list[str], start: float, timeout_s: float) -> list[str]:
    """Expressions with no finite value over [start, now], polled until none is left or time runs out."""
    missing = list(exprs)
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=prom, timeout=10) as api:
        while missing and time.monotonic() < deadline:
            time.sleep(1.0)
            still = []
            for expr in missing:
                params: dict[str, str | float] = {
                    "query": fill(expr),
                    "start": start,
                    "end": time.time(),
                    "step": "1",
                }
                r = api.get("/api/v1/query_range", params=params)
                assert r.status_code == 200, f"{expr}: {r.text}"
                if not has_data(r.json()["data"]["result"]):
                    still.append(expr)
            missing = still
    return missing


def test_every_dashboard_expression_returns_data(fresh_redis_server: Any) -> None:
    exprs = dashboards.expressions(dashboards.build())
    assert len(exprs) >= 15
    metrics_port = free_port()
    env = {"DISTRS_TOKENS": f"{TOKENS},{METRICS_TOKEN}:metrics", "DISTRS_METRICS_AUTH": "true"}
    with (
        running_service(
            workers={"compile": 1, "execute": 1}, redis_url=fresh_redis_server.url, env=env
        ) as svc,
        planner_process(fresh_redis_server.url, svc.url, metrics_port, svc.workdir),
        gpu_worker_metrics() as gpu_worker,
    ):
        assert httpx.get(f"{svc.url}/metrics").status_code == 401  # the scrape needs its token
        targets = {
            "distrs-proxy": f"127.0.0.1:{svc.port}",
            "distrs-planner": f"127.0.0.1:{metrics_port}",
            "distrs-worker-gpu": gpu_worker,
        }
        tokens = {"distrs-proxy": METRICS_TOKEN}
        with prometheus(targets, tokens) as prom, svc.client() as client, svc.client(WORKER) as ghost:
            start = time.time()
            replay(client, ghost)
            missing = missing_data(prom, exprs, start, timeout_s=20)  # lease TTL (5 s) + a few scrapes
            up = httpx.get(f"{prom}/api/v1/query", params={"query": "up"}).json()["data"]["result"]
            expired = httpx.get(
                f"{prom}/api/v1/query",
                params={"query": 'max_over_time(distrs_lease_expiries_total{stage="verify"}[1m])'},
            ).json()["data"]["result"]
        assert {s["metric"]["job"]: s["value"][1] for s in up} == {
            "distrs-proxy": "1",
            "distrs-planner": "1",
            "distrs-worker-gpu": "1",
        }
        assert missing == [], "no data for:\n" + "\n".join(missing) + "\n" + svc.logs()[-3000:]
        assert expired and float(expired[0]["value"][1]) >= 1, "the ghost's abandoned lease was not counted"
