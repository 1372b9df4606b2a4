"""The GPU check's KernelBench candidates: honest CUDA solutions and the execute-stage hacks.

Every candidate is a module in KernelBench's format: it builds its CUDA with
``torch.utils.cpp_extension.load_inline`` (``cuda_sources``) when imported and defines
``ModelNew``. All of them make the very same ``load_inline`` call (:data:`LOAD_CALL`, over
``kb_kernels.cu``), so the check, the GPU test tier and a rerun share one nvcc build through the
compile stage's build cache; each ``ModelNew`` calls only its own function of it.

:func:`candidate` gives the honest solution of a problem of ``kb_problems.py``. :data:`HACKS`
are the execute stage's hack suite on KernelBench's ReLU: each is judged with the honest
candidate's build (the compile stage's static checks would refuse several of them before any
build; the check bypasses those to prove the run-time defence on its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUDA_SOURCE = (HERE / "kb_kernels.cu").read_text()
EXTENSION = "distrs_gpu_check_kernels"
# name -> C++ signature, as declared to load_inline (its bindings are made from these)
SIGNATURES = {
    "relu": "torch::Tensor relu(torch::Tensor x)",
    "gelu": "torch::Tensor gelu(torch::Tensor x)",
    "softmax": "torch::Tensor softmax(torch::Tensor x)",
    "rmsnorm": "torch::Tensor rmsnorm(torch::Tensor x, double eps)",
    "matmul": "torch::Tensor matmul(torch::Tensor a, torch::Tensor b)",
    "linear_bias_relu": "torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor w, torch::Tensor bias)",
    "relu_wrong": "torch::Tensor relu_wrong(torch::Tensor x)",
    "relu_copy": "torch::Tensor relu_copy(torch::Tensor x)",
    "relu_oob": "torch::Tensor relu_oob(torch::Tensor x)",
}
FUNCTIONS = list(SIGNATURES)
CPP_SOURCE = "\n".join(f"{sig};" for sig in SIGNATURES.values()) + "\n"

HEADER = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
{CUDA_SOURCE}"""

cpp_source = """
{CPP_SOURCE}"""

kernels = load_inline(
    name="{EXTENSION}",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions={FUNCTIONS!r},
    verbose=False,
)
'''


def _plain(forward_args: str, body: str) -> str:
    return (
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n\n"
        f"    def forward(self, {forward_args}):\n"
        f"{body}"
    )


# problem key -> ModelNew (constructor arguments as the problem's get_init_inputs() gives them)
MODEL_NEW = {
    "19_ReLU": _plain("x", "        return kernels.relu(x)\n"),
    "23_Softmax": _plain("x", "        return kernels.softmax(x)\n"),
    "26_GELU_": _plain("x", "        return kernels.gelu(x)\n"),
    "36_RMSNorm_": (
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, num_features: int, eps: float = 1e-5):\n"
        "        super().__init__()\n"
        "        self.num_features = num_features\n"
        "        self.eps = eps\n\n"
        "    def forward(self, x):\n"
        "        return kernels.rmsnorm(x, self.eps)\n"
    ),
    "1_Square_matrix_multiplication_": _plain("A, B", "        return kernels.matmul(A, B)\n"),
    # the same parameters, made in the same order from the same seed as the reference's
    "76_Gemm_Add_ReLU": (
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, in_features, out_features, bias_shape):\n"
        "        super().__init__()\n"
        "        self.gemm = nn.Linear(in_features, out_features, bias=False)\n"
        "        self.bias = nn.Parameter(torch.randn(bias_shape))\n\n"
        "    def forward(self, x):\n"
        "        return kernels.linear_bias_relu(x, self.gemm.weight, self.bias)\n"
    ),
}


def candidate(problem_key: str) -> str:
    """The honest CUDA candidate of a problem of ``kb_problems.PROBLEMS``."""
    return f"{HEADER}\n\n{MODEL_NEW[problem_key]}"


def relu_candidate(forward: str, extra: str = "") -> str:
    """A candidate for KernelBench's ReLU with this ``forward`` body (indented 8 spaces) and
    ``extra`` module code after the build."""
    return f"{HEADER}{extra}\n\n{_plain('x', forward)}"


@dataclass(frozen=True)
class Hack:
    forward: str  # ModelNew.forward's body
    extra: str  # module code after the build
    caught: bool  # must end wrong_answer; else caught, or charged at least the honest time
    what: str

    def source(self) -> str:
        return relu_candidate(self.forward, self.extra)


HACKS: dict[str, Hack] = {
    "wrong_output": Hack(
        "        return kernels.relu_wrong(x)\n",
        "",
        True,
        "a kernel with the wrong threshold (zero below 0.5)",
    ),
    "cached_result": Hack(
        "        if not hasattr(self, 'memo'):\n"
        "            self.memo = kernels.relu(x)\n"
        "        kernels.relu(x[:1])\n"
        "        return self.memo\n",
        "",
        True,
        "the first call's output returned for every later call (the kernel still runs on one row)",
    ),
    "uninitialized_output": Hack(
        "        kernels.relu(x[:1])\n        return torch.empty_like(x)\n",
        "",
        True,
        "torch.empty_like returned, hoping to land on the reference's freed output (the kernel "
        "runs on one row only)",
    ),
    "input_zeroing": Hack(
        "        x.zero_()\n        return kernels.relu(x)\n",
        "",
        True,
        "the input zeroed in place, so a reference run afterwards on the same tensor would agree",
    ),
    "side_stream": Hack(
        "        s = torch.cuda.Stream()\n"
        "        with torch.cuda.stream(s):\n"
        "            out = kernels.relu(x)\n"
        "        return out\n",
        "",
        False,
        "the kernel launched on a side stream that the timing events on the current stream do not see",
    ),
    "timer_patch": Hack(
        "        return kernels.relu(x)\n",
        "\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001\n",
        False,
        "torch.cuda.Event.elapsed_time patched to report 1 us per call",
    ),
    "decoy_copy": Hack(
        "        return kernels.relu_copy(x)\n",
        "",
        True,
        "no kernel: a device-to-device copy through the extension, right for torch.rand's "
        "non-negative inputs; only the profiler's list of kernels can tell",
    ),
}

# A kernel that writes far outside its output (an illegal memory access), for the GPU tests.
OUT_OF_BOUNDS = relu_candidate("        return kernels.relu_oob(x)\n")
