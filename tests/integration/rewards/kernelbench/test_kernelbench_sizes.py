"""``kernelbench`` at KernelBench's current sizes, on the CPU backend: a 2 GiB input and a 2 GiB
output judged in a CI machine's memory.

The outputs stay in the two judging processes: the candidate hands them to the reference's
process through the output window one chunk at a time, and the host (this test's process) never
holds them, which its own peak memory shows. A harness that ships whole outputs through a pipe
(capped at 1 GiB) ended this request ``internal_error``.
"""

from __future__ import annotations

import resource
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler
from tests.fixtures.kernel_problems import (
    BIG_COLS,
    BIG_RELU_HONEST,
    BIG_RELU_LAST_WRONG,
    BIG_RELU_REFERENCE,
    BIG_ROWS,
    relu_reference,
)
from tests.integration.rewards.kernelbench.conftest import payload, stage_input

pytestmark = [pytest.mark.kernels, pytest.mark.slow]
MiB = 1 << 20


def relu_payload(candidate: str, reference: str, **kw: Any) -> dict[str, Any]:
    return {**payload(candidate), "original_model_src": reference, **kw}


@pytest.fixture(scope="module")
def relu_artifacts(compiler: CompileHandler) -> dict[str, str]:
    out = compiler.run(stage_input("compile", relu_payload(BIG_RELU_HONEST, BIG_RELU_REFERENCE)))
    assert out.outcome == "next", out
    return out.artifacts


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_two_gib_output_is_judged_ok(executor: ExecuteHandler, relu_artifacts: dict[str, str]) -> None:
    before = peak_rss()
    p = relu_payload(BIG_RELU_HONEST, BIG_RELU_REFERENCE, num_correct_trials=1, measure_performance=False)
    out = executor.run(stage_input("execute", p, relu_artifacts))
    d = out.detail
    assert out.status is Status.OK, d
    assert d["correctness"] is True and d["metadata"]["correctness_trials"] == "(1 / 1)"
    assert 2 * 1024 * MiB <= BIG_ROWS * BIG_COLS * 4
    assert d["metadata"]["reference_peak_bytes"] >= 2 * 1024 * MiB  # its input and output were real
    # the host held no output: its peak grew by far less than one output's 2 GiB
    assert peak_rss() - before < 256 * MiB


def test_a_wrong_last_element_is_found_past_the_first_chunk(
    executor: ExecuteHandler, relu_artifacts: dict[str, str]
) -> None:
    """Three window slots' worth of output (192 MiB): the only wrong element is in the last chunk."""
    reference = relu_reference(3 * 4096, 4096)
    p = relu_payload(BIG_RELU_LAST_WRONG, reference, num_correct_trials=1, measure_performance=False)
    out = executor.run(stage_input("execute", p, relu_artifacts))
    assert out.status is Status.WRONG_ANSWER, out.detail
    assert f"1 of {3 * 4096 * 4096} elements outside tolerance" in out.detail["reason"]
    assert float(out.detail["metadata"]["max_difference"]) == pytest.approx(1.0, abs=1e-6)


def test_timed_calls_at_size_keep_memory_bounded(
    executor: ExecuteHandler, relu_artifacts: dict[str, str]
) -> None:
    """Timing and its spot checks on a 256 MiB output (two window chunks): digests are computed
    in blocks, and the full comparison of a timed call passes through the window as a trial's."""
    reference = relu_reference(4 * 4096, 4096)
    p = relu_payload(BIG_RELU_HONEST, reference, num_correct_trials=1, num_perf_trials=2)
    out = executor.run(stage_input("execute", p, relu_artifacts))
    d = out.detail
    assert out.status is Status.OK, d
    assert d["runtime_stats"]["num_trials"] == 2 and d["runtime"] > 0 and d["ref_runtime"] > 0
