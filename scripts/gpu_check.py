"""The prepared GPU check's driver: start ``distrs up`` (CPU compile workers, one GPU execute
worker), run each check of ``CHECKS`` against it, and write one JSON report.

``scripts/gpu-check.sh`` installs what is needed, runs ``make test-gpu`` and then this driver,
passing the test tier's JUnit file and exit status so the report holds everything. Run alone::

    python scripts/gpu_check.py --report gpu-check.json [--only health_probe cuda_programs]

Adding a check: write ``def my_check(ctx: Ctx) -> dict`` returning at least ``{"ok": bool}`` (plus
whatever figures it measured) and append ``("my_check", my_check)`` to ``CHECKS``. A check that
raises is reported as failed with the error; the others still run. ``ctx.left_s()`` is the time
left of the whole run's budget (the check should fit in it); ``ctx.submit`` scores one batch.

Why a separate driver and not pytest: the report is the product here (figures for the issue's
closing note: verdicts, runtimes, speedups, timing noise, GPU health events, versions), and a
failed check must not hide the figures of the others.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # kernelbench_slice
REPORT_FORMAT = "distrs-gpu-check/1"

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


@dataclass
class Ctx:
    """What a check gets: the service, the GPU worker's health port, the clock and budget."""

    url: str
    gpu_url: str
    deadline: float
    work: Path
    client: httpx.Client
    clock: Callable[[], float] = time.monotonic
    shared: dict[str, Any] = field(default_factory=dict)

    def left_s(self) -> float:
        return max(0.0, self.deadline - self.clock())

    def submit(self, items: list[tuple[str, dict[str, Any]]], wait_s: float) -> list[dict[str, Any]]:
        """Score one batch of (reward_type, payload); the results in submission order."""
        task, batch = "gpu-check", uuid.uuid4().hex[:8]
        r = self.client.post("/v1/batches", json={"task": task, "batch_id": batch, "size": len(items)})
        r.raise_for_status()
        reqs = [
            {"task": task, "batch_id": batch, "request_id": f"{batch}-{i}", "reward_type": rt, "payload": p}
            for i, (rt, p) in enumerate(items)
        ]
        self.client.post("/v1/requests", json={"requests": reqs}).raise_for_status()
        end = self.clock() + min(wait_s, self.left_s())
        body: dict[str, Any] = {}
        while self.clock() < end:
            body = self.client.get(f"/v1/batches/{task}/{batch}/results", params={"wait_s": 5}).json()
            if body.get("complete"):
                break
        else:
            raise TimeoutError(f"batch {batch} incomplete after {wait_s:g} s: {body}")
        order = {f"{batch}-{i}": i for i in range(len(items))}
        return sorted(body["results"], key=lambda x: order[x["request_id"]])


Check = Callable[[Ctx], dict[str, Any]]


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample stdev / mean); None below two values or a zero mean."""
    if len(values) < 2 or statistics.mean(values) == 0:
        return None
    return statistics.stdev(values) / statistics.mean(values)


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
        "stages": [{k: s.get(k) for k in ("name", "run_s", "outcome")} for s in res.get("stages", [])],
        **(
            {"error": str(d.get("error") or d.get("compiler_output") or "")[:500]}
            if res.get("status") != want
            else {}
        ),
    }


# checks -----------------------------------------------------------------------------------------


def versions(ctx: Ctx) -> dict[str, Any]:
    from importlib import metadata

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

    out: dict[str, Any] = {
        "ok": True,
        "python": platform.python_version(),
        "distrs_commit": run("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"),
        "nvcc": run("nvcc", "--version"),
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
    """The same honest kernel in n separate requests on one idle GPU: spread of runtime and speedup."""
    payload = {"code": CUDA_ADD, "tests": CUDA_ADD_TESTS, "reference_time_s": 1.0}
    res = ctx.submit([("cuda", payload)] * n, wait_s=240)
    ok = [r for r in res if r.get("status") == "ok"]
    runtimes = [float(r["detail"]["run_time_s"]) for r in ok]
    speedups = [float(r["detail"]["speedup"]) for r in ok]
    cv_rt, cv_sp = cv(runtimes), cv(speedups)
    return {
        "ok": len(ok) == n,
        "requests": n,
        "ok_results": len(ok),
        "settings": "cuda type: one run per test case, wall time of the jailed process (start, CUDA "
        "context, kernel, exit); no warm-up, no L2 flush, clocks as the driver sets them",
        "runtime_s": {
            "mean": statistics.mean(runtimes) if runtimes else None,
            "cv": cv_rt,
            "values": runtimes,
        },
        "speedup": {"mean": statistics.mean(speedups) if speedups else None, "cv": cv_sp, "values": speedups},
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


def kernelbench_slice(ctx: Ctx) -> dict[str, Any]:
    """Ten KernelBench-format problems (plus a wrong kernel and a torch decoy) through the
    ``kernelbench`` type: built by the CPU compile workers, judged on the GPU."""
    from kernelbench_slice import slice_items

    items = slice_items()
    res = ctx.submit([("kernelbench", p) for _, _, p in items], wait_s=min(600.0, ctx.left_s()))
    rows = []
    for (name, want, _), r in zip(items, res, strict=True):
        d = r.get("detail") or {}
        rows.append(
            {
                "problem": name,
                "expected": want,
                "status": r.get("status"),
                "score": r.get("score"),
                "runtime_ms": d.get("runtime"),
                "ref_runtime_ms": d.get("ref_runtime"),
                "speedup": d.get("speedup"),
                "runtime_stats": d.get("runtime_stats"),
                "flags": d.get("flags"),
                "stages": [{k: s.get(k) for k in ("name", "run_s", "outcome")} for s in r.get("stages", [])],
                **(
                    {"reason": str(d.get("reason") or d.get("error") or "")[:500]}
                    if r.get("status") != want
                    else {}
                ),
            }
        )
    ctx.shared["kernelbench_ok"] = rows[0]["status"] == "ok"
    return {"ok": all(r["status"] == r["expected"] for r in rows), "problems": rows}


def kernelbench_timing_noise(ctx: Ctx, n: int = 10) -> dict[str, Any]:
    """One honest kernel in n separate requests: spread of its runtime and speedup."""
    from kernelbench_slice import slice_items

    _, _, payload = slice_items()[0]
    res = ctx.submit([("kernelbench", payload)] * n, wait_s=min(300.0, ctx.left_s()))
    ok = [r for r in res if r.get("status") == "ok"]
    runtimes = [float(r["detail"]["runtime"]) for r in ok]
    speedups = [float(r["detail"]["speedup"]) for r in ok]
    this_ref = [
        float(r["detail"]["metadata"].get("ref_runtime_this_request", {}).get("mean", "nan")) for r in ok
    ]
    cv_rt, cv_sp = cv(runtimes), cv(speedups)
    return {
        "ok": len(ok) == n,
        "requests": n,
        "ok_results": len(ok),
        "settings": "kernelbench: 3 warm-up calls, 101 timed calls (first dropped), L2 flushed (256 MB) and "
        "the device synchronised before each, CUDA events around forward, fresh inputs per call; the "
        "reference's runtime kept per problem, GPU and torch; clocks as the driver sets them",
        "runtime_ms": {
            "mean": statistics.mean(runtimes) if runtimes else None,
            "cv": cv_rt,
            "values": runtimes,
        },
        "speedup": {"mean": statistics.mean(speedups) if speedups else None, "cv": cv_sp, "values": speedups},
        "reference_runtime_each_request_ms": {"cv": cv([v for v in this_ref if v == v]), "values": this_ref},
        "targets": {"runtime_cv": 0.02, "speedup_cv": 0.03},
        "meets_targets": cv_rt is not None and cv_sp is not None and cv_rt <= 0.02 and cv_sp <= 0.03,
    }


CHECKS: list[tuple[str, Check]] = [
    ("versions", versions),
    ("gpu_ready", gpu_ready),
    ("health_probe", health_probe),
    ("cuda_programs", cuda_programs),
    ("timing_noise", timing_noise),
    ("cuda_error_recovery", cuda_error_recovery),
    ("gpu_metrics", gpu_metrics),
    ("kernelbench_slice", kernelbench_slice),
    ("kernelbench_timing_noise", kernelbench_timing_noise),
]


# running ----------------------------------------------------------------------------------------


def run_checks(checks: list[tuple[str, Check]], ctx: Ctx) -> list[dict[str, Any]]:
    """Each check's result with its name and time; an exception is a failed check, and once the
    budget is spent the remaining checks are reported as skipped."""
    out = []
    for name, check in checks:
        t0 = ctx.clock()
        if ctx.left_s() <= 0:
            out.append({"name": name, "ok": False, "skipped": "time budget spent", "seconds": 0.0})
            continue
        try:
            res = dict(check(ctx))
            res.setdefault("ok", False)
        except Exception as exc:  # a failed check is a finding, not the end of the run
            res = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.append({"name": name, **res, "seconds": round(ctx.clock() - t0, 3)})
        print(
            f"[gpu-check] {name}: {'ok' if res['ok'] else 'FAILED'} ({out[-1]['seconds']:.1f} s)",
            file=sys.stderr,
        )
    return out


def parse_junit(path: Path | None) -> dict[str, Any] | None:
    """Counts and per-test outcomes of a pytest JUnit XML file (None without one)."""
    if path is None or not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    cases = []
    for case in (c for s in suites for c in s.iter("testcase")):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                reason = (el.get("message") or "")[:300]
                break
        else:
            reason = ""
        row = {
            "test": f"{case.get('classname')}::{case.get('name')}",
            "outcome": outcome,
            "seconds": float(case.get("time") or 0),
        }
        if reason:
            row["reason"] = reason
        cases.append(row)
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    return {**counts, "tests": cases}


def build_report(
    checks: list[dict[str, Any]],
    test_gpu: dict[str, Any] | None,
    install: dict[str, Any] | None,
    started: float,
    finished: float,
) -> dict[str, Any]:
    ok = all(c["ok"] for c in checks)
    if test_gpu is not None:
        ok = ok and test_gpu.get("rc") == 0 and (test_gpu.get("junit") or {}).get("passed", 0) > 0
    return {
        "format": REPORT_FORMAT,
        "ok": ok,
        "started_unix": round(started, 3),
        "seconds": round(finished - started, 3),
        "install": install,
        "test_gpu": test_gpu,
        "checks": checks,
        "failed": [c["name"] for c in checks if not c["ok"]],
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def distrs_up(work: Path, gpu_port: int) -> Iterator[str]:
    """``distrs up`` here: memory store, static policy (two compile workers, one GPU worker)."""
    port = free_port()
    env = {**os.environ, "DISTRS_STATIC_REPLICAS": "2", "PYTHONUNBUFFERED": "1", **kernel_env(work)}
    config = work / "pipelines.yaml"  # torch-extension builds take minutes of CPU
    config.write_text(json.dumps({"stages": {"compile": {"timeout_s": 900}, "execute": {"timeout_s": 300}}}))
    log = open(work / "distrs-up.log", "wb")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "distrs.cli", "up", "--insecure", "--port", str(port), "--policy", "static"]
    cmd += ["--max-workers", "4", "--gpu-workers", "1", "--gpu-health-port", str(gpu_port)]
    cmd += ["--worker-log-dir", str(work), "--log-level", "info", "--config", str(config)]
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"distrs up exited {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        else:
            raise RuntimeError("distrs up did not answer /healthz in 60 s")
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


def kernel_env(work: Path) -> dict[str, str]:
    """The kernelbench type's settings for this GPU: its own architecture, a build cache, all cores."""
    env = {
        "DISTRS_KERNELS_CACHE_DIR": str(work / "kernel-cache"),
        "DISTRS_KERNELS_BUILD_JOBS": str(os.cpu_count() or 2),
        "DISTRS_KERNELS_COMPILE_TIME_S": "900",
    }
    with contextlib.suppress(Exception):
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        env["DISTRS_KERNELS_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    return env


def default_report_path() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu-check.json" if out else Path("gpu-check.json")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--report", type=Path, default=None, help="JSON report path (default $OUT/gpu-check.json)"
    )
    ap.add_argument("--budget-s", type=float, default=240.0, help="time for all checks together")
    ap.add_argument("--only", nargs="*", default=None, help="run only these checks")
    ap.add_argument("--junit", type=Path, default=None, help="make test-gpu's JUnit XML")
    ap.add_argument("--test-gpu-rc", type=int, default=None)
    ap.add_argument("--test-gpu-seconds", type=float, default=None)
    ap.add_argument("--install", type=Path, default=None, help="JSON written by the install step")
    ap.add_argument("--work", type=Path, default=None, help="folder for logs")
    args = ap.parse_args(argv)
    report_path = args.report or default_report_path()
    work = args.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"distrs-gpu-check-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    checks = [(n, c) for n, c in CHECKS if args.only is None or n in args.only]
    started = time.time()
    test_gpu = None
    if args.test_gpu_rc is not None:
        test_gpu = {
            "rc": args.test_gpu_rc,
            "seconds": args.test_gpu_seconds,
            "junit": parse_junit(args.junit),
        }
    install = json.loads(args.install.read_text()) if args.install and args.install.exists() else None
    gpu_port = free_port()
    results: list[dict[str, Any]]
    try:
        with distrs_up(work, gpu_port) as url, httpx.Client(base_url=url, timeout=30) as client:
            ctx = Ctx(url, f"http://127.0.0.1:{gpu_port}", time.monotonic() + args.budget_s, work, client)
            results = run_checks(checks, ctx)
    except Exception as exc:  # the service did not start: say so in the report
        results = [
            {"name": "distrs_up", "ok": False, "error": f"{type(exc).__name__}: {exc}", "seconds": 0.0}
        ]
    report = build_report(results, test_gpu, install, started, time.time())
    logs = sorted(work.glob("*.log"))
    if not report["ok"] and logs:
        report["log_tail"] = {p.name: p.read_text(errors="replace")[-4000:] for p in logs}
    write_report(report_path, report)
    print(
        f"[gpu-check] report: {report_path} ({'ok' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])})",
        file=sys.stderr,
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
