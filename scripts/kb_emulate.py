"""The GPU check's CUDA kernels (``kb_kernels.cu``) rewritten to run on a CPU, for checking them
against the references before a GPU ever sees them.

A kernel's logic (indexing, bounds, grid-stride loops, shared-memory reductions, the GEMM's
tiles) is what a first GPU run would find wrong, and nvcc only proves it compiles. Here the same
source is compiled by g++ as a C++ torch extension on CPU tensors, with a small emulation of
CUDA's execution model in front of it:

* a launch ``kernel<<<grid, threads, 0, stream>>>(args);`` runs the grid's blocks one after
  another, each block's threads as real threads (``std::thread``), so ``__syncthreads()`` is a
  real barrier among them and ``__shared__`` arrays (made ``static``: one copy, used by one
  block at a time) are shared exactly as on a GPU;
* ``threadIdx`` is per thread, ``blockIdx``/``blockDim``/``gridDim`` per launch;
* CUDA's math (``expf``, ``erff``, ``sqrtf``, ``fmaxf``) is the C library's, and
  ``cudaMemcpyAsync`` a ``memcpy``.

What it cannot show: timing, races that only a GPU's scheduling would expose, and faults of
memory access (an out-of-bounds kernel is never run here). The rewriting is textual and only
knows the forms ``kb_kernels.cu`` uses (its header comment says so).
"""

from __future__ import annotations

import re

# The launch form of kb_kernels.cu: name (with template arguments), configuration, arguments.
LAUNCH = re.compile(r"(\b[A-Za-z_]\w*(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);", re.S)
INCLUDE = re.compile(r"^\s*#include\s*[<\"].*[>\"]\s*$", re.M)

EMULATION_HEADER = r"""
#include <condition_variable>
#include <cstring>
#include <math.h>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 blockIdx, blockDim, gridDim;
inline thread_local dim3 threadIdx;

class KbcBarrier {
 public:
  explicit KbcBarrier(unsigned n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    const unsigned gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  unsigned n_, count_ = 0, gen_ = 0;
};
inline KbcBarrier* kbc_barrier = nullptr;
inline void __syncthreads() { kbc_barrier->wait(); }

// One launch: blocks in order, each block's threads at once.
template <class Body>
void kbc_launch(dim3 grid, dim3 block, Body body) {
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        KbcBarrier barrier(n);
        kbc_barrier = &barrier;
        std::vector<std::thread> threads;
        threads.reserve(n);
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([&, t] {
            threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            body();
          });
        for (auto& th : threads) th.join();
      }
}

enum { cudaMemcpyDeviceToDevice = 3 };
inline int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int, int) {
  std::memcpy(dst, src, bytes);
  return 0;
}
"""


def _config(text: str) -> tuple[str, str]:
    """(grid, threads) of a launch configuration ``grid, threads[, shared, stream]``."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2 or any(not p for p in parts):
        raise ValueError(f"cannot read the launch configuration <<<{text}>>>")
    return parts[0], parts[1]


def rewrite_launches(source: str) -> str:
    """Each ``kernel<<<grid, threads, ...>>>(args);`` as a call of the emulated launcher."""

    def launch(m: re.Match[str]) -> str:
        grid, threads = _config(m.group(2))
        return f"kbc_launch(dim3({grid}), dim3({threads}), [&]() {{ {m.group(1)}({m.group(3)}); }});"

    return LAUNCH.sub(launch, source)


def emulated_source(cuda_source: str) -> str:
    """``cuda_source`` as C++ for a CPU torch extension (see the module docstring)."""
    body = INCLUDE.sub("", cuda_source)
    body = body.replace("at::cuda::getCurrentCUDAStream()", "0")
    body = rewrite_launches(body)
    if "<<<" in body:
        raise ValueError("a launch the rewriting does not know is left in the source")
    return "#include <torch/extension.h>\n" + EMULATION_HEADER + body


def build(cuda_source: str, functions: list[str], build_dir: str) -> object:
    """The emulated extension, built (or reused) under ``build_dir`` by torch's ``load_inline``."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        name="distrs_gpu_check_kernels_emulated",
        cpp_sources=[emulated_source(cuda_source)],
        functions=functions,
        extra_cflags=["-O2", "-pthread"],
        extra_ldflags=["-pthread"],
        build_directory=build_dir,
        verbose=False,
    )
