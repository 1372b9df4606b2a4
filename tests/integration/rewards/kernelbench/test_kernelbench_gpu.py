"""``kernelbench`` on a real GPU (``make test-gpu``): the CUDA-specific hacks and faults.

Skipped where no NVIDIA GPU is present; builds use nvcc for the GPU's own architecture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from distrs.core.model import Status
from distrs.rewards.cuda import gpu_devices
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler
from distrs.sandbox.local import LocalSandbox
from tests.fixtures.kernel_problems import (
    CUDA_ADD_RELU,
    CUDA_HACK_EXTRA,
    CUDA_HACKS,
    CUDA_OUT_OF_BOUNDS,
    cuda_hacked,
)
from tests.integration.rewards.kernelbench.conftest import kernel_settings, payload, stage_input

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.kernels,
    pytest.mark.skipif(not gpu_devices(), reason="needs an NVIDIA GPU"),
]


def gpu_settings():  # type: ignore[no-untyped-def]
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return kernel_settings(
        device="cuda", cuda_arch_list=f"{major}.{minor}", build_jobs=max(2, os.cpu_count() or 2)
    )


@pytest.fixture(scope="module")
def gpu_handlers(kernel_sandbox: LocalSandbox) -> Iterator[tuple[CompileHandler, ExecuteHandler]]:
    s = gpu_settings()
    yield CompileHandler(kernel_sandbox, s), ExecuteHandler(kernel_sandbox, s)


@pytest.fixture(scope="module")
def cuda_artifacts(gpu_handlers: tuple[CompileHandler, ExecuteHandler]) -> dict[str, str]:
    out = gpu_handlers[0].run(stage_input("compile", payload(CUDA_ADD_RELU, backend="cuda")))
    assert out.outcome == "next", out
    return out.artifacts


def run(gpu_handlers, artifacts, candidate):  # type: ignore[no-untyped-def]
    return gpu_handlers[1].run(
        stage_input("execute", payload(candidate, backend="cuda", num_perf_trials=50), artifacts)
    )


def test_honest_cuda_kernel(gpu_handlers, cuda_artifacts) -> None:  # type: ignore[no-untyped-def]
    out = run(gpu_handlers, cuda_artifacts, CUDA_ADD_RELU)
    d = out.detail
    assert out.status is Status.OK, d
    assert d["metadata"]["hardware"] == d["versions"]["gpu"] and d["runtime"] > 0 and d["speedup"] > 0
    assert not [f for f in d["flags"] if f["check"] == "time_outside_events"]


@pytest.mark.parametrize("hack", sorted(CUDA_HACKS))
def test_cuda_hacks_gain_nothing(gpu_handlers, cuda_artifacts, hack: str) -> None:  # type: ignore[no-untyped-def]
    honest = run(gpu_handlers, cuda_artifacts, CUDA_ADD_RELU)
    out = run(gpu_handlers, cuda_artifacts, cuda_hacked(CUDA_HACKS[hack], CUDA_HACK_EXTRA.get(hack, "")))
    if hack == "uninitialized_output":
        assert out.status is Status.WRONG_ANSWER, out.detail
        return
    # either caught outright, or charged at least the honest kernel's time (within noise)
    assert out.status in (Status.OK, Status.WRONG_ANSWER), out.detail
    if out.status is Status.OK:
        assert out.detail["runtime"] >= 0.7 * honest.detail["runtime"], (out.detail, honest.detail)


def test_illegal_memory_access_is_a_runtime_error(gpu_handlers) -> None:  # type: ignore[no-untyped-def]
    built = gpu_handlers[0].run(stage_input("compile", payload(CUDA_OUT_OF_BOUNDS, backend="cuda")))
    assert built.outcome == "next", built
    out = run(gpu_handlers, built.artifacts, CUDA_OUT_OF_BOUNDS)
    assert out.status is Status.RUNTIME_ERROR and out.score == 0.0, out.detail
    # the next request on the same worker is unaffected: a fresh process per request
    assert gpu_handlers[1].ready() == (True, "")
