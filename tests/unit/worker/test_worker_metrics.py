"""The worker's /metrics with a fake NVML: per-GPU gauges in base units, GPU-seconds per request,
health checks; missing NVML values are left out and a failing read never fails the scrape."""

from __future__ import annotations

import dataclasses

import httpx
from prometheus_client.parser import text_string_to_metric_families

from distrs.metrics import GPU_GAUGES, GPU_LABELS, WorkerMetrics
from distrs.worker.health import serve_health
from distrs.worker.nvml import PyNvml
from tests.fixtures.gpu import HEALTHY, FakeDevice, FakeNvml, fake_pynvml


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_gpu_gauges_and_gpu_seconds_on_the_health_port() -> None:
    nvml = FakeNvml()
    m = WorkerMetrics(gpu_read=lambda: [nvml.read(None)])
    m.request_gpu_seconds.labels("cuda").observe(1.5)
    m.request_gpu_seconds.labels("cuda").observe(0.5)
    m.gpu_health_checks.labels("first", "healthy").inc()
    m.gpu_healthy.set(1)
    server = serve_health(0, lambda: (True, ""), host="127.0.0.1", registry=m.registry)
    try:
        got = scrape(server.server_address[1])
        labels = {"gpu": HEALTHY.uuid, "model": HEALTHY.name}
        assert got["distrs_gpu_memory_total_bytes"] == [(labels, 80 * 2**30)]
        assert got["distrs_gpu_sm_clock_hertz"] == [(labels, 345e6)]
        assert got["distrs_gpu_temperature_celsius"] == [(labels, 33.0)]
        assert got["distrs_gpu_power_watts"] == [(labels, 70.5)]
        assert got["distrs_request_gpu_seconds_sum"] == [({"reward_type": "cuda"}, 2.0)]
        assert got["distrs_request_gpu_seconds_count"] == [({"reward_type": "cuda"}, 2.0)]
        assert got["distrs_gpu_health_checks_total"] == [({"trigger": "first", "result": "healthy"}, 1.0)]
        assert got["distrs_gpu_healthy"] == [({}, 1.0)]
        # a MIG slice gives no utilisation or power: those series are absent, not zero
        nvml.state = dataclasses.replace(HEALTHY, utilization=None, power_w=None, mig=True)
        got = scrape(server.server_address[1])
        assert "distrs_gpu_utilization_ratio" not in got and "distrs_gpu_power_watts" not in got
        assert got["distrs_gpu_memory_used_bytes"][0][1] == 600 * 2**20
        # NVML failing (GPU lost): the scrape still answers, without GPU gauges
        nvml.error = "GPU is lost"
        got = scrape(server.server_address[1])
        assert not any(
            name.startswith("distrs_gpu_")
            and name != "distrs_gpu_healthy"
            and not name.startswith("distrs_gpu_health_checks")
            for name in got
        )
        assert got["distrs_request_gpu_seconds_count"][0][1] == 2.0
    finally:
        server.shutdown()


def test_gauges_from_pynvml_readings_and_bounded_labels() -> None:
    nvml = PyNvml(fake_pynvml(FakeDevice("GPU-x", util=(55, 20), temp=64)))
    m = WorkerMetrics(gpu_read=lambda: [nvml.read(None)])
    reg = m.registry
    lab = {"gpu": "GPU-x", "model": "NVIDIA H100 80GB HBM3"}
    assert reg.get_sample_value("distrs_gpu_utilization_ratio", lab) == 0.55
    assert reg.get_sample_value("distrs_gpu_memory_utilization_ratio", lab) == 0.2
    assert reg.get_sample_value("distrs_gpu_temperature_celsius", lab) == 64.0
    assert reg.get_sample_value("distrs_gpu_memory_clock_hertz", lab) == 2619e6
    # every GPU series carries exactly (gpu, model): one series per GPU the worker owns
    for fam in reg.collect():
        if (
            fam.name.startswith("distrs_gpu_")
            and fam.name not in ("distrs_gpu_healthy",)
            and not fam.name.startswith("distrs_gpu_health_checks")
        ):
            assert all(tuple(s.labels) == GPU_LABELS for s in fam.samples), fam.name
            assert len(fam.samples) <= 1
    assert {name for name, _, _ in GPU_GAUGES} <= {f.name for f in reg.collect()}


def test_worker_metrics_without_a_gpu_have_no_gpu_gauges() -> None:
    m = WorkerMetrics()
    assert not any(f.name == "distrs_gpu_utilization_ratio" for f in m.registry.collect())
