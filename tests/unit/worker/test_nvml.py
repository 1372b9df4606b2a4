"""``PyNvml`` over a pynvml-shaped fake: what each NVML answer becomes, which GPU is picked, and
that missing counters are None rather than errors."""

from __future__ import annotations

import pytest

from distrs.worker.nvml import NvmlError, PyNvml, select_gpu
from tests.fixtures.gpu import FakeDevice, fake_pynvml

UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
MIG = "MIG-bbbbbbbb-0000-0000-0000-000000000002"


def test_reading_maps_units_and_drains_xids() -> None:
    d = FakeDevice(UUID, procs=[(4242, 3 << 30), (4243, None)], xids=[79, 13])
    s = PyNvml(fake_pynvml(d)).read(None)
    assert (s.uuid, s.name, s.mig) == (UUID, "NVIDIA H100 80GB HBM3", False)
    assert s.utilization == pytest.approx(0.37) and s.memory_utilization == pytest.approx(0.12)
    assert s.sm_clock_hz == 1980e6 and s.memory_clock_hz == 2619e6 and s.power_w == 250.0
    assert s.temperature_c == 41.0 and s.memory_total_bytes == 80 << 30
    assert s.processes == ((4242, 3 << 30), (4243, 0))
    assert s.xids == (79, 13) and s.xids_readable
    assert (s.ecc_uncorrected, s.retirement_pending, s.remap_failed) == (0, False, False)


def test_xids_are_read_once() -> None:
    d = FakeDevice(UUID, xids=[79])
    nvml = PyNvml(fake_pynvml(d))
    assert nvml.read(None).xids == (79,)
    assert nvml.read(None).xids == ()
    d.xids.append(48)
    assert nvml.read(None).xids == (48,)


def test_a_scrape_does_not_eat_the_health_checks_xids() -> None:
    d = FakeDevice(UUID, xids=[79])
    nvml = PyNvml(fake_pynvml(d))
    assert nvml.read(None, consume_xids=False).xids == (79,)  # a metrics scrape sees it ...
    d.xids.append(48)
    assert nvml.read(None, consume_xids=False).xids == (79, 48)
    assert nvml.read(None).xids == (79, 48)  # ... and the health check still gets both
    assert nvml.read(None).xids == ()


def test_mig_slice_gives_what_it_has() -> None:
    d = FakeDevice(
        MIG,
        mig=True,
        util=None,
        power_mw=None,
        temp=None,
        ecc=None,
        rows=None,
        pages_pending=None,
        events_supported=False,
    )
    s = PyNvml(fake_pynvml(FakeDevice(UUID), d)).read(MIG)
    assert s.mig and s.uuid == MIG
    assert s.utilization is None and s.power_w is None and s.temperature_c is None
    assert s.ecc_uncorrected is None and s.retirement_pending is None and not s.xids_readable
    assert s.memory_used_bytes == 600 << 20


def test_pending_retirement_and_failed_remap() -> None:
    s = PyNvml(fake_pynvml(FakeDevice(UUID, rows=(0, 2, 1, 1)))).read("0")
    assert s.retirement_pending is True and s.remap_failed is True
    s = PyNvml(fake_pynvml(FakeDevice(UUID, rows=None, pages_pending=1))).read("0")
    assert s.retirement_pending is True and s.remap_failed is None


def test_gpu_selection() -> None:
    a, b = FakeDevice(UUID), FakeDevice("GPU-cccc")
    nvml = PyNvml(fake_pynvml(a, b))
    assert nvml.read("1").uuid == "GPU-cccc"
    assert nvml.read(UUID).uuid == UUID
    with pytest.raises(NvmlError, match="sees 2 GPUs"):
        nvml.read(None)
    with pytest.raises(NvmlError, match="several GPUs"):
        nvml.read("0,1")
    with pytest.raises(NvmlError, match="cannot read GPU"):
        nvml.read("GPU-nope")


def test_lost_gpu_and_missing_driver_are_errors() -> None:
    d = FakeDevice(UUID)
    nvml = PyNvml(fake_pynvml(d))
    nvml.read(None)
    d.lost = True
    with pytest.raises(NvmlError, match="15"):
        nvml.read(None)
    with pytest.raises(NvmlError, match="NVML unavailable"):
        PyNvml(fake_pynvml(init_error=9)).read(None)


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, None),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "0"),
        ({"CUDA_VISIBLE_DEVICES": MIG}, MIG),
        ({"NVIDIA_VISIBLE_DEVICES": UUID}, UUID),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        ({"CUDA_VISIBLE_DEVICES": "2", "NVIDIA_VISIBLE_DEVICES": UUID}, "2"),
    ],
)
def test_select_gpu(env: dict[str, str], want: str | None) -> None:
    assert select_gpu(env) == want
