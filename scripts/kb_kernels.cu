// The CUDA kernels of the GPU check's KernelBench candidates (scripts/kb_kernels.py).
//
// Every candidate of the check, and every GPU test of the kernelbench type, builds this one
// source with the same load_inline call, so the whole check costs one nvcc build; each
// candidate calls only its own function. Plain CUDA C++: fp32, no tensor cores, grid-stride
// loops, shared-memory tree reductions (no warp intrinsics), every launch on torch's current
// stream. Kernel names start with kbc_ (no PyTorch kernel contains that), so the profiler's
// list of launched kernels can be matched against them.
//
// Launches are written `kernel<<<grid, threads, 0, stream>>>(args);`, one per statement:
// scripts/kb_emulate.py rewrites exactly that form to run these kernels on a CPU. The stream
// comes from ATen/cuda/CUDAContext.h, as most KernelBench candidates take it; that header also
// wants cuSPARSE's and cuBLAS's headers, which a compiler-only toolkit lacks and the compile
// stage finds in torch's CUDA wheels (toolchain.wheel_cuda_includes): this build proves it.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// Blocks for a grid-stride loop over n elements: enough to fill an H100 several times over.
static int kbc_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return (int)(b < 4096 ? b : 4096);
}

static void kbc_check_float(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32, got ", t.scalar_type());
}

// ---- element-wise --------------------------------------------------------------------------

__global__ void kbc_relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = v < 0.f ? 0.f : v;  // NaN stays NaN, as torch.relu keeps it
  }
}

__global__ void kbc_gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  }
}

// For the check's hack suite: a ReLU with the wrong threshold (wrong for inputs in [0, 0.5)).
__global__ void kbc_relu_wrong_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = v < 0.5f ? 0.f : v;
  }
}

// For the GPU tests: writes 256 GiB past its output, an illegal memory access.
__global__ void kbc_relu_oob_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i + ((int64_t)1 << 36)] = x[i];
}

static torch::Tensor kbc_unary(torch::Tensor x, int which) {
  kbc_check_float(x, "x");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return y;
  const int threads = 256;
  const int grid = kbc_blocks(n, threads);
  auto stream = at::cuda::getCurrentCUDAStream();
  const float* src = xc.data_ptr<float>();
  float* dst = y.data_ptr<float>();
  if (which == 0) {
    kbc_relu_kernel<<<grid, threads, 0, stream>>>(src, dst, n);
  } else if (which == 1) {
    kbc_gelu_kernel<<<grid, threads, 0, stream>>>(src, dst, n);
  } else if (which == 2) {
    kbc_relu_wrong_kernel<<<grid, threads, 0, stream>>>(src, dst, n);
  } else {
    kbc_relu_oob_kernel<<<grid, threads, 0, stream>>>(src, dst, n);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

torch::Tensor relu(torch::Tensor x) { return kbc_unary(x, 0); }
torch::Tensor gelu(torch::Tensor x) { return kbc_unary(x, 1); }
torch::Tensor relu_wrong(torch::Tensor x) { return kbc_unary(x, 2); }
torch::Tensor relu_oob(torch::Tensor x) { return kbc_unary(x, 3); }

// For the hack suite: no kernel at all, a device-to-device copy (right only where x >= 0, as
// KernelBench's ReLU inputs from torch.rand are). The profiler sees a copy, none of ours.
torch::Tensor relu_copy(torch::Tensor x) {
  kbc_check_float(x, "x");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  auto stream = at::cuda::getCurrentCUDAStream();
  cudaMemcpyAsync(y.data_ptr<float>(), xc.data_ptr<float>(), xc.numel() * sizeof(float),
                  cudaMemcpyDeviceToDevice, stream);
  return y;
}

// ---- row softmax ---------------------------------------------------------------------------

// A block-wide reduction in shared memory; blockDim.x must be a power of two.
template <bool IS_MAX>
__device__ float kbc_block_reduce(float v, float* red) {
  const int t = threadIdx.x;
  red[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] = IS_MAX ? fmaxf(red[t], red[t + s]) : red[t] + red[t + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

#define KBC_ROW_THREADS 1024

// One block per row: the row's max, the sum of exp(x - max), then exp(x - max) / sum.
__global__ void __launch_bounds__(KBC_ROW_THREADS)
    kbc_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float red[KBC_ROW_THREADS];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = kbc_block_reduce<true>(m, red);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
  s = kbc_block_reduce<false>(s, red);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) / s;
}

torch::Tensor softmax(torch::Tensor x) {
  kbc_check_float(x, "x");
  TORCH_CHECK(x.dim() == 2, "softmax over dim 1 of a 2-D tensor, got ", x.dim(), " dimensions");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t rows = xc.size(0), cols = xc.size(1);
  if (rows == 0 || cols == 0) return y;
  const int grid = (int)rows;
  const int threads = KBC_ROW_THREADS;
  auto stream = at::cuda::getCurrentCUDAStream();
  kbc_softmax_kernel<<<grid, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

// ---- RMS norm over dim 1 -------------------------------------------------------------------

// x is (batch, feats, inner...): one thread per (batch, inner position); its feats values are
// inner elements apart, so a warp's loads are contiguous.
__global__ void kbc_rmsnorm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t batch,
                                   int64_t feats, int64_t inner, float eps) {
  const int64_t total = batch * inner;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t b = i / inner, s = i - b * inner;
    const float* xp = x + b * feats * inner + s;
    float* yp = y + b * feats * inner + s;
    float acc = 0.f;
    for (int64_t f = 0; f < feats; ++f) {
      const float v = xp[f * inner];
      acc += v * v;
    }
    const float rms = sqrtf(acc / (float)feats + eps);
    for (int64_t f = 0; f < feats; ++f) yp[f * inner] = xp[f * inner] / rms;
  }
}

torch::Tensor rmsnorm(torch::Tensor x, double eps) {
  kbc_check_float(x, "x");
  TORCH_CHECK(x.dim() >= 2, "RMS norm over dim 1 needs at least 2 dimensions");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t batch = xc.size(0), feats = xc.size(1);
  if (xc.numel() == 0) return y;
  const int64_t inner = xc.numel() / (batch * feats);
  const int threads = 256;
  const int grid = kbc_blocks(batch * inner, threads);
  auto stream = at::cuda::getCurrentCUDAStream();
  kbc_rmsnorm_kernel<<<grid, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), batch, feats,
                                                   inner, (float)eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

// ---- GEMM ----------------------------------------------------------------------------------

#define KBC_TILE 64
#define KBC_DEPTH 16

// C (M x N) = A (M x K) times B (K x N), or times B^T where B is (N x K) as nn.Linear keeps its
// weight; with BIAS_RELU, relu(C + bias[col]). A 64 x 64 tile of C per block of 256 threads,
// each accumulating a 4 x 4 set of outputs (rows ty + 16 i, columns tx + 16 j) over 16-deep
// slices of A and B staged in shared memory.
template <bool TRANS_B, bool BIAS_RELU>
__global__ void __launch_bounds__(256)
    kbc_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
                    float* __restrict__ C, int M, int N, int K) {
  __shared__ float As[KBC_DEPTH][KBC_TILE + 4];
  __shared__ float Bs[KBC_DEPTH][KBC_TILE + 4];
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int row0 = blockIdx.y * KBC_TILE, col0 = blockIdx.x * KBC_TILE;
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += KBC_DEPTH) {
    for (int e = t; e < KBC_TILE * KBC_DEPTH; e += 256) {
      const int r = e / KBC_DEPTH, kk = e % KBC_DEPTH, gk = k0 + kk;
      const int gr = row0 + r;
      As[kk][r] = (gr < M && gk < K) ? A[(int64_t)gr * K + gk] : 0.f;
      if (TRANS_B) {
        const int gc = col0 + r;  // here r counts the tile's columns (rows of B)
        Bs[kk][r] = (gc < N && gk < K) ? B[(int64_t)gc * K + gk] : 0.f;
      } else {
        const int kb = e / KBC_TILE, c = e % KBC_TILE;
        const int gkb = k0 + kb, gc = col0 + c;
        Bs[kb][c] = (gkb < K && gc < N) ? B[(int64_t)gkb * N + gc] : 0.f;
      }
    }
    __syncthreads();
    for (int kk = 0; kk < KBC_DEPTH; ++kk) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
    if (r >= M) continue;
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx + 16 * j;
      if (c >= N) continue;
      float v = acc[i][j];
      if (BIAS_RELU) {
        v += bias[c];
        v = v < 0.f ? 0.f : v;
      }
      C[(int64_t)r * N + c] = v;
    }
  }
}

static dim3 kbc_tiles(int M, int N) {
  return dim3((unsigned)((N + KBC_TILE - 1) / KBC_TILE), (unsigned)((M + KBC_TILE - 1) / KBC_TILE), 1);
}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
  kbc_check_float(a, "A");
  kbc_check_float(b, "B");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "matmul of (M, K) and (K, N)");
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  const int M = (int)ac.size(0), K = (int)ac.size(1), N = (int)bc.size(1);
  auto c = torch::empty({M, N}, ac.options());
  if (M == 0 || N == 0) return c;
  const dim3 grid = kbc_tiles(M, N);
  const int threads = 256;
  auto stream = at::cuda::getCurrentCUDAStream();
  kbc_gemm_kernel<false, false><<<grid, threads, 0, stream>>>(ac.data_ptr<float>(), bc.data_ptr<float>(),
                                                              nullptr, c.data_ptr<float>(), M, N, K);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return c;
}

// relu(x @ w^T + bias): nn.Linear's weight w is (out_features, in_features).
torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {
  kbc_check_float(x, "x");
  kbc_check_float(w, "weight");
  kbc_check_float(bias, "bias");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "x (M, K) and weight (N, K)");
  TORCH_CHECK(bias.numel() == w.size(0), "one bias per output feature");
  auto xc = x.contiguous();
  auto wc = w.contiguous();
  auto bc = bias.contiguous();
  const int M = (int)xc.size(0), K = (int)xc.size(1), N = (int)wc.size(0);
  auto c = torch::empty({M, N}, xc.options());
  if (M == 0 || N == 0) return c;
  const dim3 grid = kbc_tiles(M, N);
  const int threads = 256;
  auto stream = at::cuda::getCurrentCUDAStream();
  kbc_gemm_kernel<true, true><<<grid, threads, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                            bc.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return c;
}
