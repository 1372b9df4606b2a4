"""``kernelbench`` on a real GPU (``make test-gpu``): KernelBench's ReLU at its real size, the
CUDA-specific hacks, an illegal memory access, and the profiler's proof that the candidate's own
kernel ran.

Skipped where no NVIDIA GPU is present. The candidates are the prepared GPU check's
(``scripts/kb_kernels.py``): they all make one ``load_inline`` call, so this tier costs one
nvcc build for the GPU's own architecture, kept in the CPU tier's build cache, which
``scripts/gpu_check.py`` fills before it runs this tier.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageOutput
from distrs.rewards.cuda import gpu_devices
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler
from distrs.sandbox.local import LocalSandbox
from scripts.kb_kernels import HACKS, OUT_OF_BOUNDS, candidate
from scripts.kb_problems import BY_KEY, GiB, reference_source
from tests.integration.rewards.kernelbench.conftest import kernel_settings, stage_input

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.kernels,
    pytest.mark.skipif(not gpu_devices(), reason="needs an NVIDIA GPU"),
]

RELU = BY_KEY["19_ReLU"]
SMALL = {"batch_size": 4096, "dim": 16384}  # 256 MiB in, 256 MiB out
HONEST = candidate("19_ReLU")


def gpu_settings():  # type: ignore[no-untyped-def]
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return kernel_settings(
        device="cuda", cuda_arch_list=f"{major}.{minor}", build_jobs=max(2, os.cpu_count() or 2)
    )


def relu_payload(source: str, sizes: dict[str, int] | None = SMALL, **kw: Any) -> dict[str, Any]:
    return {
        "original_model_src": reference_source(RELU, sizes=sizes),
        "custom_model_src": source,
        "backend": "cuda",
        "num_perf_trials": 50,
        **kw,
    }


@pytest.fixture(scope="module")
def gpu_handlers(kernel_sandbox: LocalSandbox) -> Iterator[tuple[CompileHandler, ExecuteHandler]]:
    s = gpu_settings()
    yield CompileHandler(kernel_sandbox, s), ExecuteHandler(kernel_sandbox, s)


@pytest.fixture(scope="module")
def relu_artifacts(gpu_handlers: tuple[CompileHandler, ExecuteHandler]) -> dict[str, str]:
    out = gpu_handlers[0].run(stage_input("compile", relu_payload(HONEST)))
    assert out.outcome == "next", out
    return out.artifacts


def judge(gpu_handlers, artifacts, source: str, **kw: Any) -> StageOutput:  # type: ignore[no-untyped-def]
    return gpu_handlers[1].run(stage_input("execute", relu_payload(source, **kw), artifacts))


def flags(out: StageOutput) -> set[str]:
    return {f["check"] for f in out.detail.get("flags") or []}


@pytest.fixture(scope="module")
def honest(gpu_handlers, relu_artifacts) -> StageOutput:  # type: ignore[no-untyped-def]
    return judge(gpu_handlers, relu_artifacts, HONEST)


def test_honest_kernel_is_judged_and_timed(honest: StageOutput) -> None:
    d = honest.detail
    assert honest.status is Status.OK, d
    assert d["metadata"]["hardware"] == d["versions"]["gpu"] and d["runtime"] > 0 and d["speedup"] > 0
    assert d["metadata"]["inputs_made_on"] == "device"
    assert "time_outside_events" not in flags(honest)


def test_profiler_sees_the_candidates_kernel(honest: StageOutput) -> None:
    """The proof that the candidate's own kernel ran works inside the jail: no
    ``kernel_ran_unverified`` flag (the profiler started, saw kernels, one of them ours)."""
    assert honest.status is Status.OK, honest.detail
    unverified = [f for f in honest.detail["flags"] if f["check"] == "kernel_ran_unverified"]
    assert not unverified, unverified


def test_a_copy_instead_of_a_kernel_is_caught_by_the_profiler(gpu_handlers, relu_artifacts) -> None:  # type: ignore[no-untyped-def]
    """ReLU of torch.rand's inputs is a copy: right values, no kernel of the candidate's. Only
    the profiler's list of what ran can tell."""
    out = judge(gpu_handlers, relu_artifacts, HACKS["decoy_copy"].source())
    assert out.status is Status.WRONG_ANSWER and out.score == 0.0, out.detail
    assert out.detail["metadata"]["hack"] == "kernel_not_in_profile"


@pytest.mark.parametrize("hack", ["side_stream", "timer_patch", "uninitialized_output"])
def test_cuda_hacks_gain_nothing(gpu_handlers, relu_artifacts, honest, hack: str) -> None:  # type: ignore[no-untyped-def]
    out = judge(gpu_handlers, relu_artifacts, HACKS[hack].source())
    if HACKS[hack].caught:
        assert out.status is Status.WRONG_ANSWER, out.detail
        return
    # either caught outright, or charged at least the honest kernel's time (0.7: within noise)
    assert out.status in (Status.OK, Status.WRONG_ANSWER), out.detail
    if out.status is Status.OK:
        assert out.detail["runtime"] >= 0.7 * honest.detail["runtime"], (out.detail, honest.detail)


def test_relu_at_kernelbench_size_is_judged_ok(gpu_handlers, relu_artifacts) -> None:  # type: ignore[no-untyped-def]
    """KernelBench's ReLU as it is today: 4096 x 393216 float32, a 6 GiB input and a 6 GiB
    output per process, compared on the device through the window."""
    out = judge(
        gpu_handlers, relu_artifacts, HONEST, sizes=None, num_correct_trials=1, measure_performance=False
    )
    d = out.detail
    assert out.status is Status.OK, d
    assert d["metadata"]["correctness_trials"] == "(1 / 1)"
    assert d["metadata"]["inputs_made_on"] == "device"
    per_tensor = RELU.memory()["output"]
    assert per_tensor > 6 * GiB - 1
    assert d["metadata"]["reference_peak_bytes"] >= 2 * per_tensor  # its input and output were real


def test_illegal_memory_access_is_a_runtime_error(gpu_handlers) -> None:  # type: ignore[no-untyped-def]
    built = gpu_handlers[0].run(stage_input("compile", relu_payload(OUT_OF_BOUNDS)))
    assert built.outcome == "next", built
    out = judge(gpu_handlers, built.artifacts, OUT_OF_BOUNDS)
    assert out.status is Status.RUNTIME_ERROR and out.score == 0.0, out.detail
    # the next request on the same worker is unaffected: a fresh process per request
    assert gpu_handlers[1].ready() == (True, "")
