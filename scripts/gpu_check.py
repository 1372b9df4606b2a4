"""The prepared GPU check's driver: the GPU test tier, ``distrs up`` with its checks, the
kernelbench build, problems, hack suite and timing noise, in one JSON report, under one deadline.

``scripts/gpu-check.sh`` installs what is needed and runs this with the machine's own python
(``python3`` there is the virtual environment that holds torch). The steps, in order, each with
a cap, overlapping where they can:

1. the kernelbench build (``--compile-only`` of this script, in the background): every
   candidate of ``kb_kernels.py`` through the compile stage, one nvcc build into the build
   cache that the GPU tier, the service and the hack suite then share;
2. the GPU test tier's tests that build no kernel (``pytest -m gpu``), while it builds;
3. ``distrs up`` (CPU compile workers, one GPU execute worker) and the checks that need no
   kernel build: versions, readiness, health, the ``cuda`` type's verdicts, recovery from a
   CUDA error, the GPU metrics;
4. the end of the build, then the GPU tier's kernelbench tests (warm cache);
5. KernelBench's problems at real sizes, the hack suite, timing noise of both types.

Run alone::

    python scripts/gpu_check.py [--report R.json] [--only NAME ...] [--skip-tier]
    python scripts/gpu_check.py --compile-only [--arch 9.0]    # no GPU needed: the build alone

``--compile-only`` is also how a machine without a GPU proves the candidates build for the
GPU's architecture. Why a driver and not pytest: the report is the product (verdicts, runtimes,
speedups, timing noise, health events, versions), and a failed check must not hide the figures
of the others.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import httpx  # noqa: E402
from gpu_check_core import (  # noqa: E402
    REPORT_FORMAT,
    Check,
    Ctx,
    build_report,
    default_report_path,
    parse_junit,
    run_checks,
    write_report,
)
from gpu_check_cuda import (  # noqa: E402
    cuda_error_recovery,
    cuda_programs,
    gpu_metrics,
    gpu_ready,
    health_probe,
    timing_noise,
    versions,
)
from gpu_check_kernels import (  # noqa: E402
    build_candidates,
    default_cache_dir,
    kernelbench_hacks,
    kernelbench_problems,
    kernelbench_timing_noise,
)

# Checks that need no kernel build, then those that do (after the build has finished).
EARLY: list[tuple[str, Check]] = [
    ("versions", versions),
    ("gpu_ready", gpu_ready),
    ("health_probe", health_probe),
    ("cuda_programs", cuda_programs),
    ("cuda_error_recovery", cuda_error_recovery),
    ("gpu_metrics", gpu_metrics),
]
LATE: list[tuple[str, Check]] = [
    ("kernelbench_problems", kernelbench_problems),
    ("kernelbench_hacks", kernelbench_hacks),
    ("timing_noise", timing_noise),
    ("kernelbench_timing_noise", kernelbench_timing_noise),
]
CHECKS = EARLY + LATE
NO_SERVICE = {"versions", "health_probe", "kernelbench_hacks"}  # run in this process

KERNEL_TESTS = "tests/integration/rewards/kernelbench"
GPU_TESTS_FALLBACK = (
    "tests/integration tests/e2e --ignore=tests/integration/k8s --ignore=tests/integration/placement"
)
# caps of the steps, seconds (the whole run's deadline caps them all)
CAP_TIER_OTHER = 150.0
CAP_SERVICE_START = 60.0
CAP_BUILD = 420.0  # from the build's start
CAP_TIER_KERNELS = 180.0
RESERVE = 10.0  # for stopping the service and writing the report


def tier_parts(makefile: str | None) -> list[tuple[str, list[str]]]:
    """The GPU test tier (``GPU_TESTS`` of the Makefile) in two parts: the tests that build no
    kernel, and the kernelbench tests, which wait for the build."""
    line = next(
        (ln for ln in (makefile or "").splitlines() if ln.startswith("GPU_TESTS ?=")),
        f"GPU_TESTS ?= {GPU_TESTS_FALLBACK}",
    )
    words = line.split("?=", 1)[1].split()
    return [("other", [*words, f"--ignore={KERNEL_TESTS}"]), ("kernelbench", [KERNEL_TESTS])]


def run_bounded(cmd: list[str], timeout_s: float, log: Path, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in a session of its own, its output to ``log``; past ``timeout_s`` it is
    interrupted (SIGINT, so pytest's fixtures stop what they started), then killed: 124."""
    with open(log, "ab") as out:
        p = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            return p.wait(max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGINT)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
            return 124


def run_tier(name: str, paths: list[str], work: Path, timeout_s: float) -> dict[str, Any]:
    """One part of the GPU test tier, by pytest in this interpreter (``make test-gpu`` would
    want ``.venv``; this machine's python is the one with torch)."""
    junit, log = work / f"test-gpu-{name}.xml", work / f"test-gpu-{name}.log"
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", *paths, "-q", "-p", "no:cacheprovider"]
    t0 = time.monotonic()
    rc = run_bounded([*cmd, f"--junitxml={junit}"], timeout_s, log)
    part = {
        "name": name,
        "paths": paths,
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 1),
        "cap_s": round(timeout_s, 1),
        "junit": parse_junit(junit),
    }
    print(f"[gpu-check] test tier ({name}): rc {rc} in {part['seconds']} s", file=sys.stderr)
    return part


def gpu_arch() -> str | None:
    """The GPU's compute capability ("9.0"), asked of torch in another process (this one holds
    no CUDA context)."""
    code = "import torch; print('%d.%d' % torch.cuda.get_device_capability(0))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kernel_env(cache_dir: str, arch: str, jobs: int) -> dict[str, str]:
    """The kernelbench type's settings for this GPU: its architecture, the shared build cache,
    every core for a build."""
    return {
        "DISTRS_KERNELS_CACHE_DIR": cache_dir,
        "DISTRS_KERNELS_BUILD_JOBS": str(jobs),
        "DISTRS_KERNELS_COMPILE_TIME_S": "900",
        "DISTRS_KERNELS_CUDA_ARCH_LIST": arch,
    }


@contextlib.contextmanager
def distrs_up(work: Path, gpu_port: int, env_extra: dict[str, str]) -> Iterator[str]:
    """``distrs up`` here: memory store, static policy (two compile workers, one GPU worker)."""
    port = free_port()
    env = {**os.environ, "DISTRS_STATIC_REPLICAS": "2", "PYTHONUNBUFFERED": "1", **env_extra}
    config = work / "pipelines.yaml"  # torch-extension builds take minutes of CPU
    config.write_text(json.dumps({"stages": {"compile": {"timeout_s": 900}, "execute": {"timeout_s": 600}}}))
    log = open(work / "distrs-up.log", "wb")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "distrs.cli", "up", "--insecure", "--port", str(port), "--policy", "static"]
    cmd += ["--max-workers", "4", "--gpu-workers", "1", "--gpu-health-port", str(gpu_port)]
    cmd += ["--worker-log-dir", str(work), "--log-level", "info", "--config", str(config)]
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + CAP_SERVICE_START
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"distrs up exited {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.3)
        else:
            raise RuntimeError(f"distrs up did not answer /healthz in {CAP_SERVICE_START:g} s")
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


def wait_build(proc: subprocess.Popen[bytes] | None, path: Path, timeout_s: float) -> dict[str, Any]:
    """The background build's report, once it has ended (or been stopped at its cap)."""
    if proc is None:
        return {"ok": False, "error": "the build was not started"}
    try:
        proc.wait(max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return {"ok": False, "error": f"the build did not end in time (stopped after {timeout_s:.0f} s more)"}
    try:
        report: dict[str, Any] = json.loads(path.read_text())
        build: dict[str, Any] = report.get("build") or {"ok": False, "error": "no build in its report"}
        return build
    except (OSError, ValueError) as e:
        return {"ok": False, "error": f"the build ended {proc.returncode} without a report: {e}"}


class Deadline:
    """The whole run's end on the monotonic clock; each step's cap is cut to what is left."""

    def __init__(self, end: float) -> None:
        self.end = end

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def cap(self, seconds: float) -> float:
        return max(0.0, min(seconds, self.left() - RESERVE))


def start_build(report: Path, cache: str, arch: str, jobs: int, work: Path) -> subprocess.Popen[bytes]:
    """The kernelbench build (``--compile-only`` of this script) in the background."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--compile-only", "--report", str(report)]
    cmd += ["--cache-dir", cache, "--arch", arch, "--jobs", str(jobs), "--work", str(work / "build")]
    with open(work / "build.log", "wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def skipped(checks: list[tuple[str, Check]], why: str) -> list[dict[str, Any]]:
    return [{"name": n, "ok": False, "skipped": why, "seconds": 0.0} for n, _ in checks]


def full_run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    started = time.time()
    budget = args.deadline_unix - started if args.deadline_unix else args.budget_s
    dl = Deadline(time.monotonic() + budget)
    arch = args.arch or gpu_arch() or "9.0"
    jobs = args.jobs or os.cpu_count() or 2
    cache = args.cache_dir or default_cache_dir()
    wanted = set(args.only) if args.only is not None else None
    early = [(n, c) for n, c in EARLY if wanted is None or n in wanted]
    late = [(n, c) for n, c in LATE if wanted is None or n in wanted]
    steps: list[dict[str, Any]] = []

    def step(name: str, t0: float, cap: float | None = None) -> None:
        steps.append({"step": name, "seconds": round(time.monotonic() - t0, 1), "cap_s": cap})

    tier: list[dict[str, Any]] | None = None if args.skip_tier else []
    t_build = time.monotonic()
    build_json = work / "build.json"
    build_proc = None
    if late or tier is not None:  # the late checks need the build; the tier's kernel tests share it
        build_proc = start_build(build_json, cache, arch, jobs, work)
    parts = tier_parts((ROOT / "Makefile").read_text() if (ROOT / "Makefile").exists() else None)
    if tier is not None:
        t0 = time.monotonic()
        tier.append(run_tier(*parts[0], work, dl.cap(CAP_TIER_OTHER)))
        step("test_gpu_other", t0, CAP_TIER_OTHER)
    results: list[dict[str, Any]] = []
    gpu_port = free_port()
    with contextlib.ExitStack() as stack:
        t0 = time.monotonic()
        client: httpx.Client | None = None
        url, service_error = "", ""
        try:
            url = stack.enter_context(distrs_up(work, gpu_port, kernel_env(cache, arch, jobs)))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
        except Exception as exc:  # the service did not start: its checks say so, the rest run
            service_error = f"distrs up did not start: {type(exc).__name__}: {exc}"
        step("service_start", t0, CAP_SERVICE_START)
        ctx = Ctx(url, f"http://127.0.0.1:{gpu_port}", dl.end - RESERVE, work, client)  # type: ignore[arg-type]
        ctx.shared.update(kernel_cache=cache, arch=arch, jobs=jobs)

        def run(checks: list[tuple[str, Check]]) -> list[dict[str, Any]]:
            if client is not None:
                return run_checks(checks, ctx)
            out = run_checks([(n, c) for n, c in checks if n in NO_SERVICE], ctx)
            return out + skipped([(n, c) for n, c in checks if n not in NO_SERVICE], service_error)

        t0 = time.monotonic()
        results += run(early)
        step("checks_early", t0)
        build: dict[str, Any] | None = None
        if build_proc is not None:
            t0 = time.monotonic()
            build = wait_build(build_proc, build_json, dl.cap(CAP_BUILD - (time.monotonic() - t_build)))
            step("build_wait", t0, CAP_BUILD)
        if tier is not None:
            t0 = time.monotonic()
            tier.append(run_tier(*parts[1], work, dl.cap(CAP_TIER_KERNELS)))
            step("test_gpu_kernelbench", t0, CAP_TIER_KERNELS)
        t0 = time.monotonic()
        ok_build = build is not None and build.get("ok")
        results += run(late) if ok_build else skipped(late, f"the kernel build failed: {build}"[:500])
        step("checks_late", t0)
    install = json.loads(args.install.read_text()) if args.install and args.install.exists() else None
    extra = {
        "budget_s": round(budget, 1),
        "steps": steps,
        "targets": {r["name"]: r["meets_targets"] for r in results if "meets_targets" in r},
    }
    report = build_report(results, tier, install, started, time.time(), build, extra)
    logs = sorted(work.glob("*.log"))
    if not report["ok"] and logs:
        report["log_tail"] = {p.name: p.read_text(errors="replace")[-4000:] for p in logs}
    return report


def compile_only(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    started = time.time()
    build = build_candidates(
        args.cache_dir or default_cache_dir(), args.arch or "9.0", args.jobs or os.cpu_count() or 2, work
    )
    return {
        "format": REPORT_FORMAT,
        "mode": "compile-only",
        "ok": bool(build.get("ok")),
        "seconds": round(time.time() - started, 3),
        "build": build,
        "failed": [] if build.get("ok") else ["build"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--report", type=Path, default=None, help="JSON report (default $OUT/gpu-check.json)")
    ap.add_argument("--budget-s", type=float, default=450.0, help="time for the whole run")
    ap.add_argument("--deadline-unix", type=float, default=None, help="the run's end (overrides --budget-s)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these checks")
    ap.add_argument("--skip-tier", action="store_true", help="skip the GPU test tier")
    ap.add_argument("--compile-only", action="store_true", help="only the kernelbench build (no GPU needed)")
    ap.add_argument("--arch", default=None, help="CUDA architecture to build for (default: this GPU's)")
    ap.add_argument("--cache-dir", default=None, help="kernelbench build cache (shared with the GPU tier)")
    ap.add_argument("--jobs", type=int, default=None, help="compiler jobs per build (default: all cores)")
    ap.add_argument("--install", type=Path, default=None, help="JSON written by the install step")
    ap.add_argument("--work", type=Path, default=None, help="folder for logs and jails")
    args = ap.parse_args(argv)
    report_path = args.report or default_report_path()
    work = args.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"distrs-gpu-check-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    report = compile_only(args, work) if args.compile_only else full_run(args, work)
    write_report(report_path, report)
    print(
        f"[gpu-check] report: {report_path} ({'ok' if report['ok'] else 'FAILED: ' + ', '.join(report['failed'])})",
        file=sys.stderr,
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
