"""Honest KernelBench-style candidates written for these tests (one problem each), as source strings.

Each must pass the static checks (no rejection); only the fused linear+ReLU one, which leaves the
matrix product to PyTorch, is flagged.
"""

RELU_CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

// one thread per element
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = relu_ext

    def forward(self, x):
        return self.ext.relu_cuda(x.contiguous())
'''

ADD_CUDA = r'''
import torch
import torch.nn as nn
import torch.utils.cpp_extension

HEADER = "#include <torch/extension.h>\n"
KERNEL = """
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        out[i] = a[i] + b[i];
    }
}
"""
LAUNCHER = """
torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 511) / 512, 512>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
CUDA_SRC = HEADER + KERNEL + LAUNCHER

elementwise_add = torch.utils.cpp_extension.load_inline(
    "elementwise_add",
    ["torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"],
    [CUDA_SRC],
    functions=["add_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return elementwise_add.add_cuda(a.contiguous(), b.contiguous())
'''

SOFTMAX_CUDA = r'''
import textwrap

import torch
from torch import nn
from torch.utils import cpp_extension

SOFTMAX_SRC = textwrap.dedent("""
    #include <torch/extension.h>
    #include <cfloat>

    template <int BLOCK>
    __global__ void __launch_bounds__(BLOCK) row_softmax_kernel(const float* x, float* y, int cols) {
        __shared__ float red[BLOCK];
        const float* row = x + (size_t)blockIdx.x * cols;
        float* out = y + (size_t)blockIdx.x * cols;
        float m = -FLT_MAX;
        for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, row[c]);
        red[threadIdx.x] = m;
        __syncthreads();
        for (int s = BLOCK / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
            __syncthreads();
        }
        m = red[0];
        __syncthreads();
        float sum = 0.f;
        for (int c = threadIdx.x; c < cols; c += BLOCK) sum += __expf(row[c] - m);
        red[threadIdx.x] = sum;
        __syncthreads();
        for (int s = BLOCK / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
            __syncthreads();
        }
        float inv = 1.f / red[0];
        for (int c = threadIdx.x; c < cols; c += BLOCK) out[c] = __expf(row[c] - m) * inv;
    }

    torch::Tensor row_softmax(torch::Tensor x) {
        auto y = torch::empty_like(x);
        const int rows = x.size(0), cols = x.size(1);
        row_softmax_kernel<256><<<rows, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
        return y;
    }
""")


class ModelNew(nn.Module):
    """Row-wise softmax over dim 1 of a 2-D input, one block per row."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim
        self.softmax_mod = cpp_extension.load_inline(
            name="row_softmax",
            cpp_sources="torch::Tensor row_softmax(torch::Tensor x);",
            cuda_sources=SOFTMAX_SRC,
            functions=["row_softmax"],
            extra_cuda_cflags=["-O3", "--use_fast_math"],
        )

    def forward(self, x):
        assert x.dim() == 2 and self.dim in (1, -1)
        return self.softmax_mod.row_softmax(x.contiguous())
'''

MATMUL_TILED_CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline as build

TILE = 32

matmul_src = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define TILE 32

__global__ void matmul_tiled_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

torch::Tensor matmul_tiled(torch::Tensor A, torch::Tensor B) {
    int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::zeros({M, N}, A.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    auto stream = at::cuda::getCurrentCUDAStream();
    matmul_tiled_kernel<<<grid, block, 0, stream>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    return C;
}
"""

_ext = build(
    name="matmul_tiled",
    cpp_sources="torch::Tensor matmul_tiled(torch::Tensor A, torch::Tensor B);",
    cuda_sources=matmul_src,
    functions=["matmul_tiled"],
)


def tiled_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _ext.matmul_tiled(a.contiguous(), b.contiguous())


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A, B):
        M, K = A.size()
        out = tiled_matmul(A.to(torch.float32), B.to(torch.float32))
        return out.view(M, -1)
'''

FUSED_LINEAR_RELU_CUDA = r'''
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

bias_relu_source = r"""
#include <torch/extension.h>

__global__ void bias_relu_kernel(float* y, const float* bias, int rows, int cols) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) {
        float v = y[idx] + bias[idx % cols];
        y[idx] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias) {
    int rows = y.size(0), cols = y.size(1);
    int total = rows * cols;
    bias_relu_kernel<<<(total + 255) / 256, 256>>>(y.data_ptr<float>(), bias.data_ptr<float>(), rows, cols);
    return y;
}
"""

fused = load_inline(
    name="bias_relu",
    cpp_sources="torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias);",
    cuda_sources=bias_relu_source,
    functions=["bias_relu"],
)


class ModelNew(nn.Module):
    """Linear + ReLU: cuBLAS (through torch) for the product, one fused kernel for bias and ReLU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))

    def forward(self, x):
        y = F.linear(x, self.weight)
        return fused.bias_relu(y.contiguous(), self.bias)
'''

SCALE_CPP = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>

torch::Tensor scale_shift_cpu(torch::Tensor x, double scale, double shift) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const int64_t n = xc.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        out[i] = in[i] * (float)scale + (float)shift;
    }
    return y;
}
"""

scale_shift = load_inline(
    name="scale_shift_cpu",
    cpp_sources=[cpp_source],
    functions=["scale_shift_cpu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift
        self.op = scale_shift.scale_shift_cpu

    def forward(self, x):
        return self.op(x, self.scale, self.shift)
'''

TRITON_ADD = r"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def triton_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    add_kernel[grid](x, y, out, n, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def forward(self, x, y):
        return triton_add(x.contiguous(), y.contiguous())
"""

GELU_AUTOGRAD_CUDA = r"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = (
    "#include <torch/extension.h>\n"
    "__global__ void gelu_fwd(const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.f + tanhf(0.79788456f * (v + 0.044715f * v * v * v))); }\n"
    "}\n"
    "torch::Tensor gelu(torch::Tensor x) {\n"
    "  auto y = torch::empty_like(x); int n = x.numel();\n"
    "  gelu_fwd<<<(n + 127) / 128, 128>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
    "  return y;\n"
    "}\n"
)


def _build():
    return load_inline(name="gelu_ext", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                       cuda_sources=src, functions=["gelu"])


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return ModelNew.ext.gelu(x)


class ModelNew(nn.Module):
    ext = None

    def __init__(self):
        super().__init__()
        if ModelNew.ext is None:
            ModelNew.ext = _build()

    def forward(self, x):
        return _Gelu.apply(x.contiguous())
"""

LAZY_BUILD_CUDA = r'''
import functools

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SQUARE = """
#include <torch/extension.h>
__global__ void square_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}
torch::Tensor square(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    square_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


@functools.lru_cache(maxsize=None)
def _ext():
    return load_inline(
        name="square_ext",
        cpp_sources="torch::Tensor square(torch::Tensor x);",
        cuda_sources=_SQUARE,
        functions=["square"],
    )


class ModelNew(nn.Module):
    def forward(self, x):
        if not x.is_contiguous():
            x = x.contiguous()
        return _ext().square(x)
'''

TRITON_SOFTMAX_AUTOTUNE = r"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (2, 4, 8)],
    key=["n_cols"],
)
@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def _launch(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        y = torch.empty_like(x)
        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._launch(x.contiguous())
"""
