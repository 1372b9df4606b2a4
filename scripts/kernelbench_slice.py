"""A small KernelBench-format slice for the prepared GPU check (``scripts/gpu_check.py``).

Ten element-wise problems, each a reference ``Model`` over torch ops with ``get_inputs()`` and
``get_init_inputs()``, and a CUDA candidate in KernelBench's usual shape (``load_inline`` with
``cuda_sources``). All candidates carry the same CUDA source, one kernel per problem, so the
whole slice costs one nvcc build (the build cache serves the other nine); each calls only its own
kernel. Two more rows check verdicts: a wrong kernel (``wrong_answer``) and torch doing the work
(rejected at compile).
"""

from __future__ import annotations

# problem -> (torch expression of x (and y), CUDA expression of a (and b))
OPS: dict[str, tuple[str, str]] = {
    "relu": ("torch.relu(x)", "a > 0.f ? a : 0.f"),
    "sigmoid": ("torch.sigmoid(x)", "1.f / (1.f + expf(-a))"),
    "tanh": ("torch.tanh(x)", "tanhf(a)"),
    "gelu": ("torch.nn.functional.gelu(x)", "0.5f * a * (1.f + erff(a * 0.70710678118654752f))"),
    "leaky_relu": ("torch.nn.functional.leaky_relu(x, 0.01)", "a > 0.f ? a : 0.01f * a"),
    "square": ("x * x", "a * a"),
    "abs": ("torch.abs(x)", "fabsf(a)"),
    "softsign": ("x / (1 + torch.abs(x))", "a / (1.f + fabsf(a))"),
    "add": ("x + y", "a + b"),
    "mul": ("x * y", "a * b"),
}
BINARY = {"add", "mul"}
N = 1 << 24  # 16M elements: 64 MiB per fp32 tensor, long enough to time on a GPU


def _kernels() -> str:
    parts = ["#include <torch/extension.h>"]
    for name, (_, expr) in OPS.items():
        if name in BINARY:
            parts.append(
                f"__global__ void {name}_kernel(const float* x, const float* y, float* z, int64_t n) {{\n"
                f"  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
                f"  if (i < n) {{ float a = x[i], b = y[i]; z[i] = {expr}; }}\n}}\n"
                f"torch::Tensor {name}_op(torch::Tensor x, torch::Tensor y) {{\n"
                f"  auto z = torch::empty_like(x); int64_t n = x.numel();\n"
                f"  {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), "
                f"z.data_ptr<float>(), n);\n  return z;\n}}"
            )
        else:
            parts.append(
                f"__global__ void {name}_kernel(const float* x, float* z, int64_t n) {{\n"
                f"  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
                f"  if (i < n) {{ float a = x[i]; z[i] = {expr}; }}\n}}\n"
                f"torch::Tensor {name}_op(torch::Tensor x) {{\n"
                f"  auto z = torch::empty_like(x); int64_t n = x.numel();\n"
                f"  {name}_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), z.data_ptr<float>(), n);\n"
                f"  return z;\n}}"
            )
    return "\n".join(parts)


def _decls() -> str:
    return "\n".join(
        f"torch::Tensor {n}_op(torch::Tensor x{', torch::Tensor y' if n in BINARY else ''});" for n in OPS
    )


CUDA_SOURCE = _kernels()
CPP_SOURCE = _decls()


def reference(name: str) -> str:
    torch_expr, _ = OPS[name]
    args = "x, y" if name in BINARY else "x"
    inputs = (
        "[torch.randn(N, device='cuda'), torch.randn(N, device='cuda')]"
        if name in BINARY
        else ("[torch.randn(N, device='cuda')]")
    )
    return (
        "import torch\nimport torch.nn as nn\n\n\n"
        f"class Model(nn.Module):\n    def forward(self, {args}):\n        return {torch_expr}\n\n\n"
        f"N = {N}\n\n\ndef get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n"
    )


def candidate(name: str, body: str | None = None) -> str:
    args = "x, y" if name in BINARY else "x"
    call = body or f"return ext.{name}_op({', '.join(a + '.contiguous()' for a in args.split(', '))})"
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        f"cuda_source = r'''\n{CUDA_SOURCE}\n'''\ncpp_source = r'''\n{CPP_SOURCE}\n'''\n\n"
        "ext = load_inline(name='kb_slice_elementwise', cpp_sources=cpp_source, cuda_sources=cuda_source,\n"
        f"                  functions={[f'{n}_op' for n in OPS]!r}, verbose=False)\n\n\n"
        f"class ModelNew(nn.Module):\n    def forward(self, {args}):\n        {call}\n"
    )


def slice_items(num_perf_trials: int = 100) -> list[tuple[str, str, dict[str, object]]]:
    """(name, expected status, payload) rows: the ten problems, a wrong kernel, a torch decoy."""
    rows: list[tuple[str, str, dict[str, object]]] = []
    for name in OPS:
        rows.append(
            (
                name,
                "ok",
                {
                    "original_model_src": reference(name),
                    "custom_model_src": candidate(name),
                    "num_perf_trials": num_perf_trials,
                },
            )
        )
    rows.append(
        (
            "relu_wrong",
            "wrong_answer",
            {
                "original_model_src": reference("relu"),
                "custom_model_src": candidate("relu", "return ext.abs_op(x.contiguous())"),
                "num_perf_trials": 10,
            },
        )
    )
    rows.append(
        (
            "relu_torch_decoy",
            "compile_error",
            {
                "original_model_src": reference("relu"),
                "custom_model_src": candidate("relu", "return torch.relu(x)"),
            },
        )
    )
    return rows
