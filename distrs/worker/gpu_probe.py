"""The GPU health check's test kernel: ``python -m distrs.worker.gpu_probe`` runs a tiny kernel on
the visible GPU and prints one JSON line ``{"ok": bool, "error"?: str, "kernel_s": float}``.

Why this way: the execute image has the driver (libcuda, injected by the NVIDIA container
toolkit) but no nvcc and no torch, so the kernel is hand-written PTX that the driver compiles
for whatever GPU it finds, loaded and launched through the CUDA driver API with ``ctypes``. It
writes ``out[i] = i*i + 7`` for 4,096 elements and the answer is checked element by element, so a
GPU that launches but computes garbage fails too. The worker runs this in a child process
with a time limit (``gpu_health.SubprocessProbe``): a hung GPU or a driver crash costs the
child, never the worker.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

N = 4096
BLOCK = 256

PTX = b"""
.version 7.0
.target sm_50
.address_size 64

.visible .entry probe(.param .u64 probe_out, .param .u32 probe_n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [probe_out];
    ld.param.u32 %r1, [probe_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    mul.lo.s32 %r6, %r5, %r5;
    add.s32 %r7, %r6, 7;
    st.global.u32 [%rd4], %r7;
DONE:
    ret;
}
\x00"""


def expected(n: int = N) -> list[int]:
    return [(i * i + 7) & 0xFFFFFFFF for i in range(n)]


class CudaError(Exception):
    pass


def _check(cuda: ctypes.CDLL, what: str, res: int) -> None:
    if res != 0:
        msg = ctypes.c_char_p()
        cuda.cuGetErrorString(res, ctypes.byref(msg))
        raise CudaError(f"{what} failed: CUDA error {res} ({(msg.value or b'?').decode()})")


def run_kernel(lib: str = "libcuda.so.1") -> list[int]:
    """Launch the probe kernel on device 0 of the visible set; the values it wrote."""
    cuda = ctypes.CDLL(lib)
    dev = ctypes.c_int()
    ctx = ctypes.c_void_p()
    mod = ctypes.c_void_p()
    fn = ctypes.c_void_p()
    dptr = ctypes.c_uint64()
    _check(cuda, "cuInit", cuda.cuInit(0))
    _check(cuda, "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
    # The device's primary context, as the CUDA runtime (and so every cuda-type program) uses it.
    _check(cuda, "cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    try:
        _check(cuda, "cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
        _check(cuda, "cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(mod), PTX))
        _check(cuda, "cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"probe"))
        _check(cuda, "cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(N * 4)))
        n = ctypes.c_uint32(N)
        params = (ctypes.c_void_p * 2)(
            ctypes.cast(ctypes.byref(dptr), ctypes.c_void_p), ctypes.cast(ctypes.byref(n), ctypes.c_void_p)
        )
        grid = (N + BLOCK - 1) // BLOCK
        _check(
            cuda,
            "cuLaunchKernel",
            cuda.cuLaunchKernel(fn, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None),
        )
        _check(cuda, "cuCtxSynchronize", cuda.cuCtxSynchronize())
        host = (ctypes.c_uint32 * N)()
        _check(cuda, "cuMemcpyDtoH", cuda.cuMemcpyDtoH_v2(host, dptr, ctypes.c_size_t(N * 4)))
        _check(cuda, "cuMemFree", cuda.cuMemFree_v2(dptr))
        return list(host)
    finally:
        cuda.cuDevicePrimaryCtxRelease_v2(dev)


def main() -> int:
    t0 = time.perf_counter()
    try:
        got = run_kernel()
    except (OSError, CudaError) as exc:
        print(json.dumps({"ok": False, "error": str(exc), "kernel_s": time.perf_counter() - t0}))
        return 1
    want = expected()
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    out: dict[str, object] = {"ok": not bad, "kernel_s": time.perf_counter() - t0}
    if bad:
        i = bad[0]
        out["error"] = f"wrong answer at {len(bad)} of {N} elements (out[{i}] = {got[i]}, want {want[i]})"
    print(json.dumps(out))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
