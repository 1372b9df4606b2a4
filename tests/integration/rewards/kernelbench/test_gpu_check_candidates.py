"""The prepared GPU check's candidates before a GPU sees them, on a machine without one:

* every candidate goes through the real ``kernelbench`` compile stage (static checks, the jailed
  import, nvcc for the H100/H200's architecture in a clean jail) and they all share one build;
* the kernels compute what KernelBench's references compute: the same CUDA source, run on the
  CPU by ``scripts/kb_emulate.py`` (every block's threads as real threads, ``__syncthreads`` a
  real barrier), against each reference's forward at reduced sizes.

Slow on a cold machine (an nvcc build of a torch extension, 2-4 minutes of a 2-core machine, and
a g++ build of the emulation, about a minute); both are cached under /var/tmp, after which the
file takes well under a minute.
"""

from __future__ import annotations

from typing import Any

import pytest

from distrs.rewards import cuda_toolkit
from distrs.rewards.kernelbench import CompileHandler
from distrs.sandbox.local import LocalSandbox
from scripts import kb_emulate, kb_kernels, kb_problems
from tests.integration.rewards.kernelbench.conftest import kernel_settings, stage_input
from tests.requirements import need

pytestmark = [pytest.mark.kernels, pytest.mark.slow]

EMULATION_DIR = "/var/tmp/distrs-gpu-check-emulated"
ATOL = RTOL = 1e-4  # the kernelbench type's fp32 tolerances (KernelBench's current ones)


@pytest.fixture(scope="module")
def gpu_compiler(kernel_sandbox: LocalSandbox) -> CompileHandler:
    need("nvcc", "the compile stage builds CUDA for the GPU", found=cuda_toolkit.resolve("nvcc"))
    return CompileHandler(kernel_sandbox, kernel_settings(device="cuda", cuda_arch_list="9.0"))


CANDIDATES = [(p.key, kb_kernels.candidate(p.key)) for p in kb_problems.PROBLEMS]
CANDIDATES.append(("relu_out_of_bounds", kb_kernels.OUT_OF_BOUNDS))


@pytest.mark.parametrize(("name", "source"), CANDIDATES, ids=[n for n, _ in CANDIDATES])
def test_candidate_builds_for_sm90_through_the_compile_stage(
    gpu_compiler: CompileHandler, name: str, source: str
) -> None:
    key = name if name in kb_problems.BY_KEY else "19_ReLU"
    payload = {
        "original_model_src": kb_problems.reference_source(kb_problems.BY_KEY[key]),
        "custom_model_src": source,
    }
    out = gpu_compiler.run(stage_input("compile", payload))
    assert out.outcome == "next", out.detail.get("compiler_output") or out.detail
    assert "kbc_relu_kernel" in out.artifacts["kernel_names"]
    assert out.artifacts["flags"] == "[]"
    # one load_inline call for them all: at most the first candidate builds, the rest hit the cache
    assert gpu_compiler.builds <= 1


@pytest.fixture(scope="module")
def emulated() -> Any:
    need("torch", "the emulated kernels are a torch extension")
    need("ninja", "torch's load_inline builds with ninja")
    need("g++", "the emulated kernels are C++")
    import os

    os.makedirs(EMULATION_DIR, exist_ok=True)
    return kb_emulate.build(kb_kernels.CUDA_SOURCE, kb_kernels.FUNCTIONS, EMULATION_DIR)


def reference_and_candidate(key: str, ext: Any) -> tuple[Any, Any, list[Any]]:
    import torch

    p = kb_problems.BY_KEY[key]
    ns: dict[str, Any] = {}
    exec(kb_problems.reference_source(p, "small"), ns)
    cns: dict[str, Any] = {"torch": torch, "nn": torch.nn, "kernels": ext}
    exec(kb_kernels.MODEL_NEW[key], cns)
    init = ns["get_init_inputs"]()
    torch.manual_seed(5)
    ref = ns["Model"](*init)
    torch.manual_seed(5)
    new = cns["ModelNew"](*init)
    torch.manual_seed(7)
    return ref, new, ns["get_inputs"]()


@pytest.mark.parametrize("key", list(kb_problems.BY_KEY))
def test_emulated_kernel_matches_the_reference(emulated: Any, key: str) -> None:
    import torch

    ref, new, inputs = reference_and_candidate(key, emulated)
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    bad = ~torch.isclose(got, want, atol=ATOL, rtol=RTOL)
    assert not bool(bad.any()), (
        f"{int(bad.sum())} of {bad.numel()} elements differ; max {float((got - want).abs().max())}"
    )


def test_emulated_kernels_are_not_trivially_right(emulated: Any) -> None:
    """The comparison above can fail: the hack suite's wrong kernel differs where it should, the
    copy is right only for non-negative inputs, and a real kernel differs from another's."""
    import torch

    x = torch.rand(5, 1000)
    wrong = emulated.relu_wrong(x)
    assert torch.equal(wrong[x >= 0.5], x[x >= 0.5]) and bool((wrong[x < 0.5] == 0).all())
    assert torch.equal(emulated.relu_copy(x), x)
    neg = x - 0.5
    assert not torch.equal(emulated.relu_copy(neg), torch.relu(neg))
    assert torch.equal(emulated.relu(neg), torch.relu(neg))
    assert not torch.allclose(emulated.gelu(x), torch.relu(x), atol=ATOL, rtol=RTOL)
