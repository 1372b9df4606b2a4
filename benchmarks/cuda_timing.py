"""Timing noise of the ``cuda`` type's execute stage: which clock, and how many runs.

The ``cuda`` type charges a program the wall time of its jailed process. Over ten requests of one
honest program on an H200, one run per case gave a runtime CV of 0.17 (target 0.02). Since then
each passed case runs ``timed_runs`` more times in fresh sessions and is charged its fastest
(``distrs/rewards/judge/timing.py``), and each run is timed from inside its jail, from the
program's exec to its exit. This measures, side by side in one run on this machine:

* **estimators** - N requests, each one judged run then three more, every run in a fresh
  session of the real jail, timed on the host's clock: the CV over requests of the judged run
  alone, of the median of the three timed runs, and of their minimum;
* **no jail** - the same binary as a plain subprocess, the floor of what any harness can
  measure on this machine (the jail's start is in every jailed run's wall time);
* **handler** - the execute stage end to end (``cuda.ExecuteHandler``), requests interleaved, in
  four variants: the jail's wall time as the host sees it or the program's own time from the
  in-jail timer (``distrs/sandbox/exec_timer.py``, ``DISTRS_JUDGE_EXEC_TIMER``), each with one
  judged run charged (``timed_runs=0``) or the fastest of 3 timed runs (the default): runtime CV
  and the stage's wall time per request (what the re-runs cost).

Without a GPU (this machine) the program is a host binary that computes for a set time, and an
empty file stands in for the GPU's device node; the jail, the sessions and the timing are the
same code as on a GPU. With ``--gpu`` the program is a CUDA vector add built with nvcc and run on
the machine's GPU (its CUDA context is then most of each run).

    .venv/bin/python benchmarks/cuda_timing.py           # writes benchmarks/results/cuda_timing.{json,md}
    .venv/bin/python benchmarks/cuda_timing.py --gpu     # on a machine with a GPU and nvcc
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distrs.rewards import cuda  # noqa: E402
from distrs.rewards.base import StageInput  # noqa: E402
from distrs.rewards.judge.settings import JudgeSettings  # noqa: E402
from distrs.sandbox import Limits, SandboxSettings, create_sandbox  # noqa: E402
from distrs.sandbox.base import Sandbox  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TARGET_CV = 0.02

HOST_PROGRAM = r"""
#include <cstdio>
#include <ctime>
int main() {
  long ms; if (std::scanf("%ld", &ms) != 1) return 1;
  timespec t0; clock_gettime(CLOCK_MONOTONIC, &t0);
  volatile double s = 0; long i = 0;
  for (;;) {
    for (int k = 0; k < 10000; ++k) s += (i++) * 0.5;
    timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= ms) break;
  }
  std::printf("%ld\n", ms);
}
"""

GPU_PROGRAM = r"""
#include <cstdio>
__global__ void add(int n, const float* a, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() {
  long n; if (std::scanf("%ld", &n) != 1) return 1;
  float *a, *b, *c;
  cudaMallocManaged(&a, n * sizeof(float)); cudaMallocManaged(&b, n * sizeof(float));
  cudaMallocManaged(&c, n * sizeof(float));
  for (long i = 0; i < n; ++i) { a[i] = i; b[i] = 2 * i; }
  add<<<(n + 255) / 256, 256>>>(n, a, b, c);
  cudaDeviceSynchronize();
  double s = 0; for (long i = 0; i < n; ++i) s += c[i];
  std::printf("%ld\n", (long)(s / n));
}
"""


def build(gpu: bool, work: Path) -> bytes:
    src = work / ("p.cu" if gpu else "p.cpp")
    src.write_text(GPU_PROGRAM if gpu else HOST_PROGRAM)
    out = work / "p"
    cc = ["nvcc", "-O2"] if gpu else ["g++", "-O1"]
    subprocess.run([*cc, "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def cv(xs: list[float]) -> float | None:
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 and statistics.mean(xs) > 0 else None


def spread(xs: list[float]) -> dict[str, Any]:
    c = cv(xs)
    return {"mean_s": round(statistics.mean(xs), 5), "cv": None if c is None else round(c, 4), "n": len(xs)}


def estimators(
    sb: Sandbox, binary: bytes, stdin: str, requests: int, mounts: Any, env: dict[str, str]
) -> dict[str, Any]:
    """Each request: one judged run then three timed runs, every one in a fresh session."""
    rows: list[list[float]] = []
    for _ in range(requests):
        walls = []
        for _ in range(4):
            with sb.session() as s:
                s.write_file("b", binary, executable=True)
                r = s.run(["./b"], limits=Limits(wall_s=30), stdin=stdin.encode(), env=env, mounts=mounts)
            if not r.ok:
                raise SystemExit(f"the benchmark program failed: {r.describe()}")
            walls.append(r.wall_s)
        rows.append(walls)
    return {
        "jail's wall, judged run alone": spread([w[0] for w in rows]),
        "jail's wall, median of 3 timed runs": spread([statistics.median(w[1:]) for w in rows]),
        "jail's wall, fastest of 3 timed runs": spread([min(w[1:]) for w in rows]),
    }


def unjailed(binary_path: Path, stdin: str, requests: int) -> dict[str, Any]:
    """The floor: the same binary as a plain subprocess, no jail, four runs per request."""
    rows = []
    for _ in range(requests):
        walls = []
        for _ in range(4):
            t0 = time.monotonic()
            subprocess.run([str(binary_path)], input=stdin.encode(), capture_output=True, check=True)
            walls.append(time.monotonic() - t0)
        rows.append(walls)
    return {
        "no jail, one run": spread([w[0] for w in rows]),
        "no jail, fastest of 3 after one": spread([min(w[1:]) for w in rows]),
    }


VARIANTS = (  # (label, exec timer, timed runs)
    ("jail's wall, one run (before)", False, 0),
    ("jail's wall, fastest of 3 timed runs", False, 3),
    ("program's own time, one run", True, 0),
    ("program's own time, fastest of 3 timed runs (default)", True, 3),
)


def handler_runs(
    sb: Sandbox, binary: bytes, stdin: str, expected: str, requests: int, dev: str
) -> dict[str, Any]:
    """The execute stage end to end in each variant, requests interleaved."""
    handlers = {
        label: cuda.ExecuteHandler(sb, JudgeSettings(test_time_s=30, exec_timer=timer), dev=dev)
        for label, timer, _ in VARIANTS
    }
    for h in handlers.values():
        ok, why = h.ready()
        if not ok:
            raise SystemExit(f"execute stage not ready: {why}")
    art = {"binary": base64.b64encode(binary).decode()}
    out: dict[str, dict[str, list[float]]] = {label: {"run": [], "stage": []} for label, _, _ in VARIANTS}
    clocks: dict[str, Any] = {}
    for _ in range(requests):
        for label, _, runs in VARIANTS:
            payload = {
                "code": "x",
                "tests": [{"stdin": stdin, "expected_stdout": expected}],
                "reference_time_s": 1.0,
                "timed_runs": runs,
            }
            t0 = time.monotonic()
            res = handlers[label].run(StageInput("r", "t", "cuda", "execute", payload, art, timeout_s=120))
            stage = time.monotonic() - t0
            if res.status.value != "ok":
                raise SystemExit(f"{label}: {res.status.value} {res.detail}")
            out[label]["run"].append(float(res.detail["run_time_s"]))
            out[label]["stage"].append(stage)
            clocks[label] = res.detail["runs_by_clock"]
    return {
        label: {
            "run_time": spread(v["run"]),
            "stage_wall_mean_s": round(statistics.mean(v["stage"]), 4),
            "runs_by_clock_last": clocks[label],
        }
        for label, v in out.items()
    }


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# Timing noise of the cuda type's execute stage",
        "",
        f"`benchmarks/cuda_timing.py{' --gpu' if res['gpu'] else ''}` on {res['machine']}; "
        f"{res['requests']} requests per row, the real jail, a fresh session per run. "
        f"Program: {res['program']}. Target: runtime CV <= {TARGET_CV}.",
        "",
    ]
    for label, block in res["estimators"].items():
        lines += [f"## Estimators, program of {label}", "", "| charge | mean (s) | CV |", "|---|---|---|"]
        lines += [f"| {k} | {v['mean_s']:.4f} | {v['cv']} |" for k, v in block.items()]
        lines.append("")
    for label, block in res["handler"].items():
        lines += [
            f"## Execute stage end to end, program of {label}",
            "",
            "| charge | run_time_s mean | CV | stage wall per request (s) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {k} | {v['run_time']['mean_s']:.4f} | {v['run_time']['cv']} | {v['stage_wall_mean_s']:.3f} |"
            for k, v in block.items()
        ]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="time a CUDA program on this machine's GPU")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if shutil.which("nvcc" if args.gpu else "g++") is None:
        raise SystemExit("needs nvcc (--gpu) or g++")
    sb = create_sandbox(SandboxSettings())
    res: dict[str, Any] = {
        "gpu": args.gpu,
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
        "requests": args.requests,
        "estimators": {},
        "handler": {},
        "isolation": sb.isolation,
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        binary = build(args.gpu, work)
        if args.gpu:
            dev, sizes = "/dev", {"a 1000-element vector add": ("1000\n", "1498\n")}
            res["program"] = "a CUDA vector add (nvcc -O2), managed memory"
        else:
            (work / "dev").mkdir()
            (work / "dev" / "nvidia0").touch()
            dev = str(work / "dev")
            sizes = {f"{ms} ms": (f"{ms}\n", f"{ms}\n") for ms in (20, 300)}
            res["program"] = "a host binary that computes for a set time (g++ -O1)"
        mounts = cuda.gpu_mounts(dev)
        env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}
        for label, (stdin, expected) in sizes.items():
            print(f"estimators: {label}", flush=True)
            res["estimators"][label] = {
                **estimators(sb, binary, stdin, args.requests, mounts, env),
                **unjailed(work / "p", stdin, args.requests),
            }
            print(f"handler: {label}", flush=True)
            res["handler"][label] = handler_runs(sb, binary, stdin, expected, args.requests, dev)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_timing.json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    (args.out / "cuda_timing.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
