"""The rewriting that runs the GPU check's CUDA kernels on a CPU (scripts/kb_emulate.py): every
launch of the real source becomes a call of the emulated launcher, and nothing CUDA-only is
left. (The emulated kernels themselves are checked against the references in
tests/integration/rewards/kernelbench/test_gpu_check_candidates.py.)"""

from __future__ import annotations

import re

import pytest

from scripts import kb_emulate, kb_kernels


def test_a_launch_becomes_a_call_of_the_emulated_launcher() -> None:
    src = "  kbc_gemm_kernel<true, true><<<grid, threads, 0, stream>>>(a.data_ptr<float>(), n);\n"
    assert kb_emulate.rewrite_launches(src) == (
        "  kbc_launch(dim3(grid), dim3(threads), [&]() { kbc_gemm_kernel<true, true>(a.data_ptr<float>(), n); });\n"
    )
    assert (
        kb_emulate.rewrite_launches("k<<<4, 256>>>(x);") == "kbc_launch(dim3(4), dim3(256), [&]() { k(x); });"
    )


def test_a_launch_it_cannot_read_is_refused() -> None:
    with pytest.raises(ValueError, match="launch configuration"):
        kb_emulate.rewrite_launches("k<<<grid>>>(x);")


def test_the_real_source_is_rewritten_whole() -> None:
    launches = len(re.findall(r"<<<", kb_kernels.CUDA_SOURCE))
    out = kb_emulate.emulated_source(kb_kernels.CUDA_SOURCE)
    assert "<<<" not in out and out.count("kbc_launch(dim3(") == launches
    assert out.startswith("#include <torch/extension.h>\n")
    assert "at::cuda::" not in out  # the stream: 0, nothing of CUDA is called
    # the only includes are torch's and the emulation's own standard headers
    includes = re.findall(r"#include\s*[<\"](.*)[>\"]", out)
    assert includes[0] == "torch/extension.h" and all("cuda" not in i for i in includes)
    with pytest.raises(ValueError, match="does not know"):
        kb_emulate.emulated_source("k<<<g, t>>>(x) ;")
