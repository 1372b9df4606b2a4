"""GPU health, metrics and timing flags on a real NVIDIA GPU (``make test-gpu``; skipped elsewhere).

The same code the fakes test, against the real driver: NVML reads the GPU the worker would own,
the PTX test kernel returns the right answer in time, a fresh guard passes its first check, the
worker's /metrics carries the GPU's gauges, and a whole GPU gives no timing flags."""

from __future__ import annotations

import pytest

from distrs.metrics import WorkerMetrics
from distrs.rewards.cuda import gpu_devices
from distrs.rewards.gpu_env import gpu_sharing, timing_flags
from distrs.worker.gpu_health import GpuGuard, HealthLimits, SubprocessProbe, assess
from distrs.worker.nvml import PyNvml, select_gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_devices(), reason="needs an NVIDIA GPU"),
]


def test_nvml_reads_the_gpu() -> None:
    s = PyNvml().read(select_gpu())
    assert s.name and s.uuid.startswith(("GPU-", "MIG-"))
    assert s.memory_total_bytes and s.memory_total_bytes > 1 << 30
    assert s.sm_clock_hz is None or s.sm_clock_hz > 1e8
    assert assess(s, (), HealthLimits(other_memory_bytes=1 << 40)) == []  # no ECC/Xid trouble


def test_probe_kernel_answers_right_in_time() -> None:
    r = SubprocessProbe()(60)
    assert r.ok, r.error
    assert r.seconds < 30


def test_guard_first_check_passes_and_metrics_show_the_gpu() -> None:
    nvml = PyNvml()
    g = GpuGuard(nvml, SubprocessProbe(), select_gpu())
    ev = g.maybe_check()
    assert ev is not None and ev.ok, ev
    assert g.ready() == (True, "")
    m = WorkerMetrics(gpu_read=lambda: [nvml.read(select_gpu())])
    names = {f.name for f in m.registry.collect() for s in f.samples}
    assert {"distrs_gpu_memory_total_bytes", "distrs_gpu_memory_used_bytes"} <= names


def test_whole_gpu_has_no_timing_flags() -> None:
    if gpu_sharing() != "exclusive":
        pytest.skip(f"this GPU is {gpu_sharing()}")
    assert timing_flags() == []
