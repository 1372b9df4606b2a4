"""The prepared GPU check's checks of the GPU worker and of the ``cuda`` reward type.

Run against ``distrs up`` (``scripts/gpu_check.py``): the versions of what runs, the GPU
worker's readiness and health checks, the ``cuda`` type's verdicts end to end (compile on the
CPU, execute on the GPU), recovery after a CUDA error, the worker's GPU metrics, and the timing
noise of one honest program over ten requests.
"""

from __future__ import annotations

import dataclasses
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however imported
from gpu_check_core import Ctx, spread, stage_seconds

ROOT = Path(__file__).resolve().parents[1]

# Programs for the cuda type, in the shape of its own GPU tests (tests/e2e, tests/integration).
CUDA_ADD = r"""
#include <cstdio>
__global__ void add(int n, const float* a, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() {
  int n; if (scanf("%d", &n) != 1) return 1;
  float *a, *b, *c;
  cudaMalloc(&a, n * sizeof(float)); cudaMalloc(&b, n * sizeof(float)); cudaMalloc(&c, n * sizeof(float));
  float* h = new float[n];
  for (int i = 0; i < n; i++) h[i] = i;
  cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice);
  for (int i = 0; i < n; i++) h[i] = 2 * i;
  cudaMemcpy(b, h, n * sizeof(float), cudaMemcpyHostToDevice);
  add<<<(n + 255) / 256, 256>>>(n, a, b, c);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e)); return 2; }
  cudaMemcpy(h, c, n * sizeof(float), cudaMemcpyDeviceToHost);
  double s = 0; for (int i = 0; i < n; i++) s += h[i];
  printf("%.1f\n", s);
  return 0;
}
"""
CUDA_ADD_TESTS = [{"stdin": "1000\n", "expected_stdout": "1498500.0\n"}]
CUDA_ILLEGAL_ADDRESS = r"""
#include <cstdio>
__global__ void bad(int* p) { p[threadIdx.x] = 1; }
int main() {
  bad<<<1, 32>>>((int*)0x10);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e)); return 2; }
  printf("0\n");
  return 0;
}
"""


def scrape(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def worker_metrics(ctx: Ctx) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The GPU worker's /metrics, parsed; a clear error where it serves none (no GPU found)."""
    r = ctx.client.get(f"{ctx.gpu_url}/metrics", timeout=10)
    if r.status_code != 200:
        raise RuntimeError(f"GPU worker serves no /metrics (HTTP {r.status_code}): it found no GPU to guard")
    return scrape(r.text)


def problem_row(name: str, res: dict[str, Any], want: str) -> dict[str, Any]:
    d = res.get("detail") or {}
    return {
        "problem": name,
        "expected": want,
        "status": res.get("status"),
        "score": res.get("score"),
        "runtime_s": d.get("run_time_s"),
        "reference_runtime_s": d.get("reference_time_s"),
        "speedup": d.get("speedup"),
        "flags": d.get("flags"),
        "compile_s": stage_seconds(res, "compile"),
        "execute_s": stage_seconds(res, "execute"),
        **(
            {"error": str(d.get("error") or d.get("compiler_output") or "")[:500]}
            if res.get("status") != want
            else {}
        ),
    }


# checks -----------------------------------------------------------------------------------------


def versions(ctx: Ctx) -> dict[str, Any]:
    def ver(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    def run(*cmd: str) -> str | None:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = [ln for ln in (p.stdout or p.stderr).splitlines() if ln.strip()]
        return lines[-1].strip() if lines else None

    from distrs.rewards import cuda_toolkit

    tk = cuda_toolkit.resolve("nvcc")  # as the workers find it: CUDA_HOME, /usr/local/cuda, PATH
    out: dict[str, Any] = {
        "ok": True,
        "python": platform.python_version(),
        "distrs_commit": run("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"),
        "nvcc_path": tk.nvcc if tk is not None else None,
        "nvcc": run(tk.nvcc, "--version") if tk is not None else None,
        "torch": ver("torch"),
        "nvidia_ml_py": ver("nvidia-ml-py"),
        "kernel": platform.release(),
    }
    from distrs.worker.nvml import NvmlError, PyNvml, select_gpu

    try:
        nvml = PyNvml()
        out["driver"] = nvml.driver_version()
        s = nvml.read(select_gpu())
        out["gpu"] = {
            "name": s.name,
            "uuid": s.uuid,
            "mig": s.mig,
            "memory_total_bytes": s.memory_total_bytes,
        }
    except NvmlError as exc:
        out.update(ok=False, error=str(exc))
    return out


def gpu_ready(ctx: Ctx) -> dict[str, Any]:
    """The GPU execute worker passes its first health check and reports ready."""
    t0 = ctx.clock()
    last: Any = None
    while ctx.clock() - t0 < min(120.0, ctx.left_s()):
        try:
            r = ctx.client.get(f"{ctx.gpu_url}/readyz", timeout=5)
            last = r.json()
            if r.status_code == 200:
                return {"ok": True, "ready_after_s": round(ctx.clock() - t0, 2)}
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.5)
    return {"ok": False, "last_readyz": last}


def health_probe(ctx: Ctx) -> dict[str, Any]:
    """One health check in this process, as the worker runs it: NVML reading + test kernel."""
    from distrs.worker.gpu_health import GpuGuard, SubprocessProbe
    from distrs.worker.nvml import NvmlError, PyNvml, select_gpu

    nvml = PyNvml()
    ev = GpuGuard(nvml, SubprocessProbe(), select_gpu()).check("manual")
    out: dict[str, Any] = {"ok": ev.ok, "event": ev.as_dict()}
    try:
        out["reading"] = dataclasses.asdict(nvml.read(select_gpu()))
    except NvmlError as exc:
        out["reading_error"] = str(exc)
    return out


def cuda_programs(ctx: Ctx) -> dict[str, Any]:
    """The cuda type end to end (compile on CPU, execute on the GPU): the verdicts it must give."""
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("add_correct", {"code": CUDA_ADD, "tests": CUDA_ADD_TESTS, "reference_time_s": 1.0}, "ok"),
        (
            "add_wrong_expected",
            {"code": CUDA_ADD, "tests": [{"stdin": "1000\n", "expected_stdout": "0\n"}]},
            "wrong_answer",
        ),
        ("syntax_error", {"code": "__global__ void k( {", "tests": CUDA_ADD_TESTS}, "compile_error"),
    ]
    res = ctx.submit([("cuda", p) for _, p, _ in cases], wait_s=180)
    rows = [problem_row(name, r, want) for (name, _, want), r in zip(cases, res, strict=True)]
    return {"ok": all(r["status"] == r["expected"] for r in rows), "problems": rows}


def timing_noise(ctx: Ctx, n: int = 10) -> dict[str, Any]:
    """The same honest program in n separate requests on one idle GPU: spread of runtime and speedup."""
    payload = {"code": CUDA_ADD, "tests": CUDA_ADD_TESTS, "reference_time_s": 1.0}
    res = ctx.submit([("cuda", payload)] * n, wait_s=240)
    ok = [r for r in res if r.get("status") == "ok"]
    runtimes = [float(r["detail"]["run_time_s"]) for r in ok]
    speedups = [float(r["detail"]["speedup"]) for r in ok]
    return noise_figures(
        n,
        len(ok),
        "cuda type: the program's own time from its exec to its exit (CUDA context, kernel, exit), "
        "taken inside the jail; one judged run then 3 timed runs per case, each in a fresh session, "
        "the fastest charged; no L2 flush, clocks as the driver sets them",
        {"runtime_s": spread(runtimes), "speedup": spread(speedups)},
    )


def noise_figures(n: int, ok: int, settings: str, figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A noise check's result: the spreads, and whether they meet the targets (runtime CV at
    most 2 %, speedup CV at most 3 %)."""
    runtime = next(v for k, v in figures.items() if k.startswith("runtime"))
    cv_rt, cv_sp = runtime["cv"], figures["speedup"]["cv"]
    return {
        "ok": ok == n,
        "requests": n,
        "ok_results": ok,
        "settings": settings,
        **figures,
        "targets": {"runtime_cv": 0.02, "speedup_cv": 0.03},
        "meets_targets": cv_rt is not None and cv_sp is not None and cv_rt <= 0.02 and cv_sp <= 0.03,
    }


def cuda_error_recovery(ctx: Ctx) -> dict[str, Any]:
    """A kernel with an illegal address: the program's fault (runtime_error, not internal_error);
    the worker checks its GPU after it, finds it healthy and serves on."""
    before = worker_metrics(ctx)
    (res,) = ctx.submit(
        [("cuda", {"code": CUDA_ILLEGAL_ADDRESS, "tests": [{"stdin": "", "expected_stdout": "0\n"}]})], 120
    )
    after = worker_metrics(ctx)

    def checks(m: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
        return {
            f"{lab['trigger']}/{lab['result']}": v for lab, v in m.get("distrs_gpu_health_checks_total", [])
        }

    ready = ctx.client.get(f"{ctx.gpu_url}/readyz", timeout=10)
    b, a = checks(before), checks(after)
    after_error = a.get("cuda_error/healthy", 0) - b.get("cuda_error/healthy", 0)
    row = problem_row("illegal_address", res, "runtime_error")
    return {
        "ok": row["status"] == "runtime_error" and after_error >= 1 and ready.status_code == 200,
        "problem": row,
        "health_checks_after_cuda_error": after_error,
        "health_checks": a,
        "ready_after": ready.json(),
    }


def gpu_metrics(ctx: Ctx) -> dict[str, Any]:
    """The GPU worker's /metrics: per-GPU gauges and the GPU-seconds of the requests it ran."""
    m = worker_metrics(ctx)
    gauges = {
        name: [v for _, v in m.get(name, [])]
        for name in (
            "distrs_gpu_utilization_ratio",
            "distrs_gpu_memory_used_bytes",
            "distrs_gpu_memory_total_bytes",
            "distrs_gpu_temperature_celsius",
            "distrs_gpu_sm_clock_hertz",
            "distrs_gpu_memory_clock_hertz",
            "distrs_gpu_power_watts",
            "distrs_gpu_healthy",
        )
    }
    gpu_s = {lab["reward_type"]: v for lab, v in m.get("distrs_request_gpu_seconds_sum", [])}
    count = {lab["reward_type"]: v for lab, v in m.get("distrs_request_gpu_seconds_count", [])}
    present = all(gauges[n] for n in ("distrs_gpu_memory_total_bytes", "distrs_gpu_sm_clock_hertz"))
    return {
        "ok": present and count.get("cuda", 0) >= 1 and gauges["distrs_gpu_healthy"] == [1.0],
        "gauges": gauges,
        "gpu_seconds": gpu_s,
        "requests": count,
    }
