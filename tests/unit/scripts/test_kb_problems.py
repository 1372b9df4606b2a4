"""The GPU check's KernelBench problems and candidates, without a GPU: the problems' facts (sizes,
inputs, memory), their reference sources run on the CPU at reduced sizes, and the candidates'
shape (one shared build, the compile stage's static checks, constructors that take the
problem's init inputs and make the reference's parameters)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from distrs.rewards.kernelbench.static_checks import check_source
from scripts import kb_kernels, kb_problems
from tests.requirements import need

GiB = 1 << 30
P = kb_problems.BY_KEY


def test_problems_have_kernelbench_sizes() -> None:
    """The sizes of KernelBench's current problems (after its July 2025 enlargement)."""
    assert P["19_ReLU"].sizes() == P["23_Softmax"].sizes() == P["26_GELU_"].sizes()
    assert P["19_ReLU"].sizes() == {"batch_size": 4096, "dim": 393216}
    assert P["36_RMSNorm_"].sizes() == {"batch_size": 112, "features": 64, "dim1": 512, "dim2": 512}
    assert P["1_Square_matrix_multiplication_"].sizes() == {"N": 4096}
    assert P["76_Gemm_Add_ReLU"].sizes() == {"batch_size": 1024, "in_features": 8192, "out_features": 8192}
    assert {p.source.split("/")[1] for p in kb_problems.PROBLEMS} == {"level1", "level2"}
    for p in kb_problems.PROBLEMS:
        assert p.source == f"KernelBench/{p.source.split('/')[1]}/{p.key}.py"
        assert set(p.small) <= set(p.sizes()), p.key


def test_memory_per_process_and_per_request() -> None:
    relu = P["19_ReLU"].memory()
    assert relu["inputs"] == relu["output"] == 4096 * 393216 * 4 == 6 * GiB
    assert relu["per_process"] == 12 * GiB and relu["two_processes"] == 24 * GiB
    rms = P["36_RMSNorm_"].memory()
    assert rms["output"] == 7 * GiB and rms["per_process"] == 14 * GiB
    gemm = P["76_Gemm_Add_ReLU"].memory()
    assert gemm["params"] == (8192 * 8192 + 8192) * 4
    table = {r["problem"]: r for r in kb_problems.memory_table()}
    assert table["19_ReLU"]["two_processes_gib"] == 24.0 and all(r["fits"] for r in table.values())
    assert not kb_problems.memory_table(gpu_bytes=24 * 10**9)[0]["fits"]  # ReLU's 24 GiB on a 24 GB GPU


def test_reference_sources_say_kernelbench_sizes() -> None:
    src = kb_problems.reference_source(P["76_Gemm_Add_ReLU"])
    assert "batch_size = 1024\nin_features = 8192\nout_features = 8192\nbias_shape = (out_features,)" in src
    assert "return [torch.rand(batch_size, in_features)]" in src
    assert "return [in_features, out_features, bias_shape]" in src
    small = kb_problems.reference_source(P["19_ReLU"], sizes={"dim": 5})
    assert "batch_size = 4096\ndim = 5\n" in small


def need_torch() -> Any:
    need("torch", "the references are torch modules")
    import torch

    return torch


def run_reference(p: kb_problems.Problem) -> tuple[Any, list[Any], Any]:
    """The reference at reduced size on the CPU: (output, inputs, the namespace)."""
    torch = need_torch()
    ns: dict[str, Any] = {}
    exec(kb_problems.reference_source(p, "small"), ns)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        return model(*inputs), inputs, ns


@pytest.mark.parametrize("key", list(P))
def test_reference_runs_on_the_cpu_at_reduced_size(key: str) -> None:
    p = P[key]
    out, inputs, _ = run_reference(p)
    small = p.sizes("small")
    assert [tuple(x.shape) for x in inputs] == [tuple(small[d] for d in sh) for sh in p.inputs]
    assert all(float(x.min()) >= 0.0 and float(x.max()) < 1.0 for x in inputs)  # torch.rand
    assert tuple(out.shape) == tuple(small[d] for d in p.output)
    assert out.dtype == inputs[0].dtype and bool(out.isfinite().all())


def test_the_references_compute_what_the_table_says() -> None:
    """Each forward, against the operation written out by hand (the candidates' kernels compute
    the latter)."""
    torch = need_torch()
    out, (x,), _ = run_reference(P["23_Softmax"])
    assert torch.allclose(out, torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True), atol=1e-7)
    out, (x,), _ = run_reference(P["26_GELU_"])
    assert torch.allclose(out, 0.5 * x * (1 + torch.erf(x / 2**0.5)), atol=1e-6)
    out, (x,), _ = run_reference(P["36_RMSNorm_"])
    assert torch.allclose(out, x / torch.sqrt((x * x).sum(dim=1, keepdim=True) / 64 + 1e-5), rtol=1e-5)
    out, (a, b), _ = run_reference(P["1_Square_matrix_multiplication_"])
    assert torch.allclose(out, (a.double() @ b.double()).float(), rtol=1e-5)


class _Kernels:
    """Stands in for the built extension: records which function a forward calls."""

    def __init__(self) -> None:
        self.called: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def fn(*args: Any) -> Any:
            self.called.append(name)
            return args[0]

        return fn


FUNCTION_OF = {
    "19_ReLU": "relu",
    "23_Softmax": "softmax",
    "26_GELU_": "gelu",
    "36_RMSNorm_": "rmsnorm",
    "1_Square_matrix_multiplication_": "matmul",
    "76_Gemm_Add_ReLU": "linear_bias_relu",
}


@pytest.mark.parametrize("key", list(P))
def test_model_new_takes_the_init_inputs_and_calls_its_own_function(key: str) -> None:
    torch = need_torch()
    p = P[key]
    _, inputs, ns = run_reference(p)
    kernels = _Kernels()
    cns: dict[str, Any] = {"torch": torch, "nn": torch.nn, "kernels": kernels}
    exec(kb_kernels.MODEL_NEW[key], cns)
    init = ns["get_init_inputs"]()
    torch.manual_seed(1)
    ref = ns["Model"](*init)
    torch.manual_seed(1)
    new = cns["ModelNew"](*init)
    # the same parameters from the same seed, made in the same order
    assert {k: v.shape for k, v in ref.state_dict().items()} == {
        k: v.shape for k, v in new.state_dict().items()
    }
    for k, v in ref.state_dict().items():
        assert torch.equal(v, new.state_dict()[k]), k
    new(*inputs)
    assert kernels.called == [FUNCTION_OF[key]]


def test_candidates_share_one_build_and_pass_the_static_checks() -> None:
    names = set(re.findall(r"^torch::Tensor (\w+)\(", kb_kernels.CUDA_SOURCE, re.M))
    assert set(kb_kernels.FUNCTIONS) <= names  # every bound function is defined
    for p in kb_problems.PROBLEMS:
        src = kb_kernels.candidate(p.key)
        assert src.startswith(kb_kernels.HEADER)  # the one load_inline call
        r = check_source(src, "cuda")
        assert r.ok and not r.flags, (p.key, r.rejections, r.flags)
        assert "kbc_gemm_kernel" in r.kernel_names and "kbc_softmax_kernel" in r.kernel_names
    for hack in kb_kernels.HACKS.values():
        assert hack.source().startswith(kb_kernels.HEADER)


def test_the_static_checks_would_refuse_the_timing_hacks() -> None:
    """Why the hack suite bypasses the compile stage: its first line refuses these two outright
    (the suite measures the execute stage's own defence)."""
    rejected = {n for n, h in kb_kernels.HACKS.items() if not check_source(h.source(), "cuda").ok}
    assert rejected == {"side_stream", "timer_patch"}
