"""``kernelbench`` end to end on the CPU: build in the jail, ship, load, judge, time; every
hack that is not CUDA-specific fails here (each would pass a harness that runs the candidate in
the reference's process, on the reference's tensors, with the same inputs per call, timing on
the candidate's own clock or trusting what the process prints)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler
from tests.fixtures.kernel_problems import (
    FORGED_EXIT,
    HACK_EXTRA,
    HACKS,
    HONEST,
    NO_KERNEL,
    PATCHED_TIMER,
    SLOW_HONEST,
    SYNTAX_ERROR_CPP,
    TRY_FALLBACK,
    hacked,
)
from tests.integration.rewards.kernelbench.conftest import execute, payload, stage_input

pytestmark = pytest.mark.kernels


def test_honest_kernel_is_correct_and_timed(
    executor: ExecuteHandler, honest_artifacts: dict[str, str]
) -> None:
    out = execute(executor, honest_artifacts, HONEST)
    d = out.detail
    assert out.status is Status.OK, d
    assert d["compiled"] is True and d["correctness"] is True
    assert d["metadata"]["correctness_trials"] == "(5 / 5)"
    assert d["runtime"] > 0 and d["ref_runtime"] > 0
    assert d["runtime_stats"]["num_trials"] == 10 and d["ref_runtime_stats"]["num_trials"] == 10
    assert d["speedup"] == pytest.approx(d["ref_runtime"] / d["runtime"])
    assert out.score == pytest.approx(min(d["speedup"], 10.0))  # the default formula
    assert d["versions"]["torch"] and d["metadata"]["device"] == "cpu"
    # an honest kernel hides no time outside its own timing; on a loaded machine a run's medians
    # can still differ by more than the margin (a preempted call is longer on the host's clock),
    # so the flag must hold on two more runs (a candidate that hides time is flagged on every run:
    # test_patched_timer_is_charged_the_hosts_clock)
    for _ in range(2):
        if not hidden_time(d):
            break
        d = execute(executor, honest_artifacts, HONEST).detail
    assert not hidden_time(d), d["flags"]


def hidden_time(detail: dict[str, Any]) -> bool:
    return any(f["check"] == "time_outside_events" for f in detail["flags"])


def test_reference_time_is_kept_per_problem(
    executor: ExecuteHandler, honest_artifacts: dict[str, str]
) -> None:
    first = execute(executor, honest_artifacts, HONEST, num_perf_trials=12)
    second = execute(executor, honest_artifacts, HONEST, num_perf_trials=12)
    assert first.status is Status.OK and second.status is Status.OK
    assert second.detail["metadata"]["ref_runtime_cached"] is True
    assert second.detail["ref_runtime_stats"] == first.detail["ref_runtime_stats"]
    assert "ref_runtime_this_request" in second.detail["metadata"]


def test_wrong_kernel_is_a_wrong_answer_with_differences(
    executor: ExecuteHandler, honest_artifacts: dict[str, str]
) -> None:
    wrong = hacked("        return self.ext.add_relu(a, b) + 0.01\n")
    out = execute(executor, honest_artifacts, wrong)
    assert out.status is Status.WRONG_ANSWER and out.score == 0.0
    assert out.detail["correctness"] is False
    assert float(out.detail["metadata"]["max_difference"]) == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize(
    ("hack", "status", "why"),
    [
        ("uninitialized_output", Status.WRONG_ANSWER, "mismatch"),
        ("zero_inputs", Status.WRONG_ANSWER, "mismatch"),
        ("torch_ops_instead", Status.WRONG_ANSWER, "never ran"),
        ("cached_result", Status.WRONG_ANSWER, "mismatch"),
        ("tensor_subclass", Status.WRONG_ANSWER, "not a plain torch.Tensor"),
        ("background_thread", Status.WRONG_ANSWER, "never ran"),
        ("alias_input", Status.WRONG_ANSWER, "shares memory with an input"),
        ("forged_reply", Status.WRONG_ANSWER, "the candidate's outputs"),
        ("predicted_seed", Status.WRONG_ANSWER, "mismatch"),
        ("segfault", Status.RUNTIME_ERROR, "ended or broke the protocol"),
    ],
)
def test_hack_fails_at_execute(
    executor: ExecuteHandler, honest_artifacts: dict[str, str], hack: str, status: Status, why: str
) -> None:
    """The run-time defence alone (the compile stage's static checks are bypassed here)."""
    out = execute(executor, honest_artifacts, hacked(HACKS[hack], HACK_EXTRA.get(hack, "")))
    assert out.status is status, out.detail
    assert out.score == 0.0 and out.detail["correctness"] is False
    assert why in out.detail["reason"], out.detail["reason"]


def test_patched_timer_is_charged_the_hosts_clock(
    executor: ExecuteHandler, honest_artifacts: dict[str, str]
) -> None:
    honest = execute(executor, honest_artifacts, SLOW_HONEST)
    patched = execute(executor, honest_artifacts, PATCHED_TIMER)
    assert honest.status is Status.OK and patched.status is Status.OK
    # both sleep 100 ms per call; the patched one's own clock says 0
    assert honest.detail["runtime"] >= 100.0
    assert patched.detail["runtime"] >= 90.0, patched.detail
    assert any(f["check"] == "time_outside_events" for f in patched.detail["flags"])


def test_execute_never_compiles(executor: ExecuteHandler, honest_artifacts: dict[str, str]) -> None:
    """A load_inline call the compile stage did not build fails; nothing is built at execute."""
    other = HONEST.replace('functions=["add_relu"],', 'functions=["add_relu"], extra_cflags=["-O1"],')
    out = execute(executor, honest_artifacts, other)
    assert out.status is Status.RUNTIME_ERROR, out.detail
    assert "the compile stage did not build" in out.detail["reason"]


def test_reference_failure_is_the_services_fault(
    executor: ExecuteHandler, honest_artifacts: dict[str, str]
) -> None:
    from tests.fixtures.kernel_problems import REFERENCE

    broken = REFERENCE.replace("return torch.relu(a + b)", "raise RuntimeError('reference broke')")
    p = {**payload(HONEST), "original_model_src": broken}
    out = executor.run(stage_input("execute", p, honest_artifacts))
    assert out.status is Status.INTERNAL_ERROR and "reference broke" in out.detail["error"]


def test_missing_artifact_is_internal_error(executor: ExecuteHandler) -> None:
    out = executor.run(stage_input("execute", payload(HONEST), {}))
    assert out.status is Status.INTERNAL_ERROR and "kernel_modules" in out.detail["error"]


def test_cuda_request_on_a_cpu_pool_is_internal_error(executor: ExecuteHandler) -> None:
    out = executor.run(stage_input("execute", payload(HONEST, backend="cuda"), {}))
    assert out.status is Status.INTERNAL_ERROR and "without a GPU" in out.detail["error"]


# -- compile ----------------------------------------------------------------------------------


def test_identical_resubmission_never_recompiles(
    compiler: CompileHandler, honest_artifacts: dict[str, str]
) -> None:
    builds = compiler.builds
    t0 = time.monotonic()
    out = compiler.run(stage_input("compile", payload(HONEST)))
    assert out.outcome == "next" and out.artifacts["compile_cached"] == "1"
    assert out.artifacts["kernel_modules"] == honest_artifacts["kernel_modules"]
    assert compiler.builds == builds and time.monotonic() - t0 < 1.0


def test_same_kernel_in_other_python_reuses_the_build(
    compiler: CompileHandler, honest_artifacts: dict[str, str]
) -> None:
    builds = compiler.builds
    out = compiler.run(stage_input("compile", payload(SLOW_HONEST)))
    assert out.outcome == "next" and "compile_cached" not in out.artifacts
    assert compiler.builds == builds  # the candidate was imported, its kernel came from the cache
    shipped = json.loads(out.artifacts["kernel_modules"])
    assert [m["key"] for m in shipped] == [m["key"] for m in json.loads(honest_artifacts["kernel_modules"])]


@pytest.mark.parametrize(
    ("source", "check"),
    [
        (NO_KERNEL, "no_custom_kernel"),
        (TRY_FALLBACK, "try_except_fallback"),
        (FORGED_EXIT, "tampering"),
        (hacked(HACKS["torch_ops_instead"]), "kernel_not_called"),
        (hacked(HACKS["background_thread"], HACK_EXTRA["background_thread"]), "threads"),
    ],
)
def test_hacks_are_rejected_before_any_build(compiler: CompileHandler, source: str, check: str) -> None:
    builds = compiler.builds
    out = compiler.run(stage_input("compile", payload(source, reward="kernelgym")))
    assert out.status is Status.COMPILE_ERROR and out.outcome == "final"
    assert check in [r["check"] for r in out.detail["rejected"]]
    assert out.score == -0.5 and out.detail["compiled"] is False  # kernelgym: a compile failure
    assert compiler.builds == builds


def test_compiler_error_carries_the_compilers_message(compiler: CompileHandler) -> None:
    out = compiler.run(stage_input("compile", payload(SYNTAX_ERROR_CPP)))
    assert out.status is Status.COMPILE_ERROR, out.detail
    text = out.detail["compiler_output"]
    assert "error" in text and "expected" in text, text[-2000:]


def test_completion_without_code_is_a_format_error(compiler: CompileHandler) -> None:
    p = {**payload(HONEST), "custom_model_src": None, "completion": "I cannot write this kernel."}
    out = compiler.run(stage_input("compile", p))
    assert out.status is Status.COMPILE_ERROR and out.detail["outcome"] == "format_error"


def test_completion_code_block_is_compiled(
    compiler: CompileHandler, honest_artifacts: dict[str, str]
) -> None:
    p = {
        **payload(HONEST),
        "custom_model_src": None,
        "completion": f"Here it is:\n```python\n{HONEST}\n```\n",
    }
    builds = compiler.builds
    out = compiler.run(stage_input("compile", p))
    assert out.outcome == "next" and compiler.builds == builds
    assert out.artifacts["kernel_modules"] == honest_artifacts["kernel_modules"]


def test_a_cached_compile_error_is_scored_by_the_resubmissions_formula(compiler: CompileHandler) -> None:
    broken = HONEST + "\nraise RuntimeError('import fails after the build')\n"
    first = compiler.run(stage_input("compile", payload(broken)))
    again = compiler.run(stage_input("compile", payload(broken, reward="kernelgym")))
    assert first.status is Status.COMPILE_ERROR and first.score == 0.0
    assert again.status is Status.COMPILE_ERROR and again.score == -0.5
