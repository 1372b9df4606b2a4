"""The prepared GPU check's ``kernelbench`` parts: the build, KernelBench's problems at their
real sizes, the execute stage's hack suite, and timing noise.

* :func:`build_candidates` puts every candidate of ``kb_kernels.py`` through the real compile
  stage (static checks, the jailed import, nvcc in a clean jail, the build cache). It needs no
  GPU: on a GPU machine it runs first, in the background, to fill the build cache the service,
  the GPU test tier and the hack suite then share; on a CPU machine it proves the candidates
  build for the GPU's architecture (``scripts/gpu_check.py --compile-only``).
* :func:`kernelbench_problems` judges the problems of ``kb_problems.py`` at KernelBench's sizes
  through the service (5 correctness trials, 100 timed calls): verdict, runtime, reference
  runtime, speedup and the execute stage's wall time of each.
* :func:`kernelbench_hacks` judges each hack of ``kb_kernels.HACKS`` with the honest
  candidate's build, straight through the stage handlers (the compile stage would refuse some of
  them before any build; here the execute stage's own defence is what is measured).
* :func:`kernelbench_timing_noise`: one honest kernel in ten requests.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, however imported
from gpu_check_core import Ctx, spread, stage_seconds
from gpu_check_cuda import noise_figures
from kb_kernels import HACKS, OUT_OF_BOUNDS, candidate
from kb_problems import BY_KEY, PROBLEMS, GiB, memory_table, reference_source

KB_TRIALS = {"num_correct_trials": 5, "num_perf_trials": 100}  # KernelBench's scripts
RELU_EXECUTE_TARGET_S = 30.0
# KernelBench's ReLU at 4096 x 65536 (1 GiB in, 1 GiB out; its real size is 4096 x 393216):
# the hack suite and the noise check, where ten requests at 6 GiB would take minutes
SMALL_RELU = {"batch_size": 4096, "dim": 65536}
HACK_UID_BASE = 63400  # a uid range of the in-process jails no worker or test uses
CHARGED_AT_LEAST = 0.9  # a hack charged at least this share of the honest kernel's runtime


def problem_payload(key: str, sizes: dict[str, int] | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "original_model_src": reference_source(BY_KEY[key], sizes=sizes),
        "custom_model_src": candidate(key),
        **KB_TRIALS,
        **kw,
    }


def _reason(res: dict[str, Any]) -> str:
    d = res.get("detail") or {}
    md = d.get("metadata") or {}
    text = (
        d.get("reason")
        or d.get("error")
        or md.get("runtime_error")
        or md.get("correctness_issue")
        or d.get("compiler_output")
    )
    return str(text or "")[:600]


def kernel_row(name: str, res: dict[str, Any], want: str) -> dict[str, Any]:
    """One judged kernelbench result, as the report shows it."""
    d = res.get("detail") or {}
    md = d.get("metadata") or {}
    row = {
        "problem": name,
        "expected": want,
        "status": res.get("status"),
        "score": res.get("score"),
        "runtime_ms": d.get("runtime"),
        "ref_runtime_ms": d.get("ref_runtime"),
        "speedup": d.get("speedup"),
        "compile_s": stage_seconds(res, "compile"),
        "execute_s": stage_seconds(res, "execute"),
        "flags": [f.get("check") for f in d.get("flags") or [] if isinstance(f, dict)],
        "correctness_trials": md.get("correctness_trials"),
        "max_difference": md.get("max_difference"),
        "inputs_made_on": md.get("inputs_made_on"),
        "reference_peak_gib": round(md["reference_peak_bytes"] / GiB, 2)
        if isinstance(md.get("reference_peak_bytes"), int)
        else None,
        "window_pinned": (d.get("versions") or {}).get("window_pinned"),
        "runtime_stats": d.get("runtime_stats"),
        "ref_runtime_stats": d.get("ref_runtime_stats"),
    }
    if res.get("status") != want:
        row["reason"] = _reason(res)
    return row


# -- the build ------------------------------------------------------------------------------------


def local_sandbox(root: Path, uid_base: int = HACK_UID_BASE) -> Any:
    """A bubblewrap jail for the stage handlers run in this process."""
    from distrs.sandbox import SandboxSettings
    from distrs.sandbox.factory import probe_bwrap
    from distrs.sandbox.local import BWRAP, LocalSandbox

    root.mkdir(parents=True, exist_ok=True)
    settings = SandboxSettings(workdir_base=str(root), uid_base=uid_base, uid_count=8)
    why = probe_bwrap(settings)
    if why is not None:
        raise RuntimeError(f"the bubblewrap jail cannot start here: {why}")
    return LocalSandbox(settings, BWRAP)


def kernel_settings(cache_dir: str, arch: str, jobs: int, device: str = "cuda") -> Any:
    from distrs.rewards.kernelbench.settings import KernelSettings

    return KernelSettings(
        device=device,
        cache_dir=cache_dir,
        cuda_arch_list=arch,
        build_jobs=jobs,
        compile_time_s=1800.0,
    )


def stage_input(stage: str, payload: dict[str, Any], artifacts: dict[str, str] | None = None) -> Any:
    from distrs.rewards.base import StageInput

    timeout = 1800.0 if stage == "compile" else 600.0
    return StageInput("gpu-check", "gpu-check", "kernelbench", stage, payload, artifacts or {}, timeout)


def build_rows() -> list[tuple[str, dict[str, Any]]]:
    """What the build puts through the compile stage: each problem's candidate at its real size,
    and the GPU tier's out-of-bounds kernel (same build)."""
    rows = [(p.key, problem_payload(p.key)) for p in PROBLEMS]
    rows.append(("relu_out_of_bounds", problem_payload("19_ReLU", custom_model_src=OUT_OF_BOUNDS)))
    return rows


def build_candidates(cache_dir: str, arch: str, jobs: int, work: Path | None = None) -> dict[str, Any]:
    """Every candidate through the compile stage; the first builds, the rest hit the cache."""
    from distrs.rewards.kernelbench import CompileHandler

    t0 = time.monotonic()
    settings = kernel_settings(cache_dir, arch, jobs)
    root = work or Path(tempfile.mkdtemp(prefix="distrs-gpu-check-build-"))
    handler = CompileHandler(local_sandbox(root / "build-sbx", HACK_UID_BASE + 8), settings)
    tk = handler.toolchain.cuda_toolkit()
    out: dict[str, Any] = {
        "arch": arch,
        "cache_dir": cache_dir,
        "jobs": jobs,
        "nvcc": tk.nvcc if tk is not None else None,
    }
    ready, why = handler.ready()
    if not ready:
        return {**out, "ok": False, "error": why, "seconds": round(time.monotonic() - t0, 3)}
    rows = []
    for name, payload in build_rows():
        builds, t = handler.builds, time.monotonic()
        res = handler.run(stage_input("compile", payload))
        row: dict[str, Any] = {
            "candidate": name,
            "built": res.outcome == "next",
            "seconds": round(time.monotonic() - t, 3),
            "new_builds": handler.builds - builds,
        }
        if res.outcome == "next":
            row["flags"] = res.artifacts.get("flags")
        else:
            row["status"] = str(res.status)
            row["reason"] = str(res.detail.get("reason") or "")[:300]
            row["compiler_output"] = str(res.detail.get("compiler_output") or "")[-3000:]
        rows.append(row)
        print(
            f"[gpu-check build] {name}: {'built' if row['built'] else 'FAILED'} in {row['seconds']:.1f} s "
            f"({row['new_builds']} new builds)",
            flush=True,
        )
    return {
        **out,
        "ok": all(r["built"] for r in rows),
        "candidates": rows,
        "nvcc_builds": handler.builds,
        "seconds": round(time.monotonic() - t0, 3),
    }


# -- checks through the service ---------------------------------------------------------------


def kernelbench_problems(ctx: Ctx) -> dict[str, Any]:
    """KernelBench's problems at their real sizes, judged through the service."""
    items = [(p, problem_payload(p.key)) for p in PROBLEMS]
    res = ctx.submit([("kernelbench", pl) for _, pl in items], wait_s=min(600.0, ctx.left_s()), partial=True)
    rows = []
    for (p, _), r in zip(items, res, strict=True):
        row = kernel_row(p.key, r, "ok")
        m = p.memory()
        row.update(
            source=p.source,
            op=p.op,
            candidate=p.candidate,
            memory_per_process_gib=round(m["per_process"] / GiB, 2),
            memory_two_processes_gib=round(m["two_processes"] / GiB, 2),
        )
        rows.append(row)
    relu = rows[0]
    met = relu["status"] == "ok" and (relu["execute_s"] or 1e9) <= RELU_EXECUTE_TARGET_S
    return {
        "ok": all(r["status"] == "ok" for r in rows),
        "settings": "KernelBench's sizes; 5 correctness trials, 100 timed calls (3 warm-ups, first "
        "dropped, L2 flushed), fp32, atol = rtol = 1e-4",
        "problems": rows,
        "memory": memory_table(),
        "targets": {"19_ReLU_execute_s": RELU_EXECUTE_TARGET_S},
        "meets_targets": met,
    }


def kernelbench_timing_noise(ctx: Ctx, n: int = 10) -> dict[str, Any]:
    """One honest kernel (ReLU at 1 GiB) in n separate requests: spread of runtime and speedup."""
    payload = problem_payload("19_ReLU", SMALL_RELU)
    res = ctx.submit([("kernelbench", payload)] * n, wait_s=min(300.0, ctx.left_s()), partial=True)
    ok = [r for r in res if r.get("status") == "ok"]
    runtimes = [float(r["detail"]["runtime"]) for r in ok]
    speedups = [float(r["detail"]["speedup"]) for r in ok]
    this_ref = [
        float((r["detail"]["metadata"].get("ref_runtime_this_request") or {}).get("mean", "nan")) for r in ok
    ]
    out = noise_figures(
        n,
        len(ok),
        "kernelbench: ReLU 4096 x 65536 float32; 3 warm-ups, 101 timed calls (first dropped), L2 "
        "flushed (256 MB) and the device synchronised before each, CUDA events around forward, "
        "fresh inputs per call; the reference's runtime kept per problem, GPU and torch; clocks as "
        "the driver sets them",
        {"runtime_ms": spread(runtimes), "speedup": spread(speedups)},
    )
    out["reference_runtime_each_request_ms"] = spread([v for v in this_ref if v == v])
    out["execute_s"] = spread([s for r in ok if (s := stage_seconds(r, "execute")) is not None])
    if len(ok) < n:
        out["not_ok"] = [kernel_row("19_ReLU", r, "ok") for r in res if r.get("status") != "ok"][:3]
    return out


# -- the hack suite, through the stage handlers -------------------------------------------------------


def hack_verdict(hack_caught: bool, status: str, runtime: float | None, honest: float | None) -> str:
    """What a hack gained: ``caught`` (wrong_answer), ``charged`` (judged ok but charged at
    least :data:`CHARGED_AT_LEAST` of the honest kernel's runtime) or ``GAINED``; a must-catch
    hack that was not caught, or any other status, is ``GAINED`` or the status itself."""
    if status == "wrong_answer":
        return "caught"
    if status != "ok":
        return status
    if hack_caught or runtime is None or honest is None or honest <= 0:
        return "GAINED"
    return "charged" if runtime >= CHARGED_AT_LEAST * honest else "GAINED"


def kernelbench_hacks(ctx: Ctx) -> dict[str, Any]:
    """Each hack of the suite, judged by the execute stage with the honest candidate's build."""
    from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler

    cache_dir, arch, jobs = ctx.shared["kernel_cache"], ctx.shared["arch"], ctx.shared["jobs"]
    settings = kernel_settings(cache_dir, arch, jobs)
    sandbox = local_sandbox(ctx.work / "hack-sbx")
    compiler, executor = CompileHandler(sandbox, settings), ExecuteHandler(sandbox, settings)
    honest_payload = problem_payload("19_ReLU", SMALL_RELU)
    built = compiler.run(stage_input("compile", honest_payload))
    if built.outcome != "next":
        return {"ok": False, "error": f"the honest candidate did not build: {built.detail}"[:2000]}

    def judge(source: str) -> tuple[Any, float]:
        t = time.monotonic()
        out = executor.run(
            stage_input("execute", {**honest_payload, "custom_model_src": source}, built.artifacts)
        )
        return out, round(time.monotonic() - t, 3)

    honest, honest_s = judge(honest_payload["custom_model_src"])
    honest_rt = honest.detail.get("runtime") if honest.status is not None else None
    base = {
        "status": str(honest.status),
        "runtime_ms": honest_rt,
        "ref_runtime_ms": honest.detail.get("ref_runtime"),
        "speedup": honest.detail.get("speedup"),
        "execute_s": honest_s,
        "flags": [f.get("check") for f in honest.detail.get("flags") or []],
    }
    rows: list[dict[str, Any]] = []
    for name, hack in HACKS.items():
        if ctx.left_s() <= 0:
            rows.append({"hack": name, "verdict": "skipped", "why": "time budget spent"})
            continue
        out, secs = judge(hack.source())
        status = str(out.status)
        runtime = out.detail.get("runtime") if status == "ok" else None
        verdict = hack_verdict(hack.caught, status, runtime, honest_rt)
        md = out.detail.get("metadata") or {}
        rows.append(
            {
                "hack": name,
                "what": hack.what,
                "expected": "wrong_answer" if hack.caught else "wrong_answer, or ok charged the honest time",
                "status": status,
                "score": out.score,
                "verdict": verdict,
                "runtime_ms": runtime,
                "runtime_vs_honest": round(runtime / honest_rt, 3) if runtime and honest_rt else None,
                "flags": [f.get("check") for f in out.detail.get("flags") or []],
                "hack_found": md.get("hack"),
                "reason": str(out.detail.get("reason") or out.detail.get("error") or "")[:400],
                "execute_s": secs,
            }
        )
    return {
        "ok": str(honest.status) == "ok" and all(r["verdict"] in ("caught", "charged") for r in rows),
        "settings": "KernelBench's ReLU at 4096 x 65536 (1 GiB), 5 correctness trials, 100 timed calls; "
        "each hack judged by the execute stage with the honest candidate's build (no static checks)",
        "honest": base,
        "hacks": rows,
    }


def default_cache_dir() -> str:
    """The build cache the GPU test tier uses too (its conftest's), so they share one build."""
    return os.environ.get("GPU_CHECK_KERNEL_CACHE", "/var/tmp/distrs-kernels-cache")
