"""Kernel judging at KernelBench's sizes: the ``kernelbench`` execute stage against a one-process
KernelBench-style loop, side by side on this machine (CPU backend; the GPU figures come from
``scripts/gpu-check.sh``).

KernelBench enlarged its level 1-3 problems so that every one runs above 1 ms: ``19_ReLU`` takes
a 4096 x 393216 input (6 GiB, and a 6 GiB output). The anchor is what its evaluator does, in one
plain process: the reference and the candidate on the same tensors, ``torch.allclose`` on the
whole outputs, one input set for the timed calls, no sandbox. The execute stage runs the two in
separate jailed processes, compares through the output window chunk by chunk, and makes fresh
inputs for every timed call. Per output size, both with the same candidate module (a C++ ReLU
built once by the compile stage), the same trials, one after the other:

* wall time of the whole judging (anchor: the process's life; execute: the stage's ``run``),
* peak memory: the anchor's process; the execute stage's reference process (its candidate
  holds as much again) and the worker's own growth (it never holds an output).

    .venv/bin/python benchmarks/kernel_sizes.py                  # 0.25, 1 and 2 GiB outputs
    .venv/bin/python benchmarks/kernel_sizes.py --sizes 0.25     # quick
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distrs.rewards.base import StageInput  # noqa: E402
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler  # noqa: E402
from distrs.rewards.kernelbench.settings import KernelSettings  # noqa: E402
from distrs.sandbox import SandboxSettings, create_sandbox  # noqa: E402
from tests.fixtures.kernel_problems import BIG_RELU_HONEST, relu_reference  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GiB = 1 << 30
COLS = 65536
CORRECT_TRIALS = 5
PERF_TRIALS = 10

# KernelBench's evaluator, reduced to what it does on one problem (eval_kernel_against_ref), in
# one process; the candidate's load_inline loads the module the compile stage built.
ANCHOR = r"""
import importlib.machinery, importlib.util, json, resource, sys, time
import torch
import torch.utils.cpp_extension as ce

so, ref_path, cand_path, trials, perf = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(1)

def load_so(*a, **k):
    loader = importlib.machinery.ExtensionFileLoader(k.get("name") or a[0], so)
    spec = importlib.util.spec_from_file_location(loader.name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod

ce.load_inline = load_so
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

t0 = time.perf_counter()
ref, cand = load("reference", ref_path), load("candidate", cand_path)
torch.manual_seed(42)
init = ref.get_init_inputs()
model = ref.Model(*init)
torch.manual_seed(42)
new = cand.ModelNew(*init)
ok = True
for t in range(trials):
    torch.manual_seed(42 + t)
    inputs = ref.get_inputs()
    out = model(*inputs)
    out_new = new(*inputs)
    ok = ok and torch.allclose(out, out_new, atol=1e-4, rtol=1e-4)
    del out, out_new
times = {"ref": [], "new": []}
for which, m in (("ref", model), ("new", new)):
    for i in range(3 + perf + 1):
        s = time.perf_counter()
        m(*inputs)
        if i >= 4:
            times[which].append((time.perf_counter() - s) * 1e3)
print(json.dumps({"ok": bool(ok), "wall_s": time.perf_counter() - t0,
                  "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "ref_ms": sum(times["ref"]) / len(times["ref"]), "new_ms": sum(times["new"]) / len(times["new"])}))
"""


def anchor(so: bytes, reference: str, work: Path) -> dict[str, Any]:
    (work / "ext.so").write_bytes(so)
    (work / "reference.py").write_text(reference)
    (work / "candidate.py").write_text(BIG_RELU_HONEST)
    r = subprocess.run(
        [sys.executable, "-c", ANCHOR, str(work / "ext.so"), str(work / "reference.py"), str(work / "candidate.py"),
         str(CORRECT_TRIALS), str(PERF_TRIALS)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    if r.returncode != 0:
        return {"ok": False, "error": (r.stderr or r.stdout)[-2000:], "returncode": r.returncode}
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="*", type=float, default=[0.25, 1.0, 2.0], help="output GiB")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="distrs-kb-sizes-") as tmp:
        sb = create_sandbox(SandboxSettings(workdir_base=f"{tmp}/sbx"))
        settings = KernelSettings(
            device="cpu", cache_dir="/var/tmp/distrs-kernels-cache", compile_time_s=1800.0
        )
        compiler, executor = CompileHandler(sb, settings), ExecuteHandler(sb, settings)
        rows = []
        for gib in args.sizes:
            rows_n = int(gib * GiB / 4 / COLS)
            reference = relu_reference(rows_n, COLS)
            payload = {
                "original_model_src": reference,
                "custom_model_src": BIG_RELU_HONEST,
                "backend": "cpp",
                "num_correct_trials": CORRECT_TRIALS,
                "num_perf_trials": PERF_TRIALS,
            }
            built = compiler.run(StageInput("r", "t", "kernelbench", "compile", payload, timeout_s=1800))
            assert built.outcome == "next", built
            so = base64.b64decode(json.loads(built.artifacts["kernel_modules"])[0]["data"])
            work = Path(tmp) / f"anchor-{gib}"
            work.mkdir()
            base = anchor(so, reference, work)
            before = rss()
            t0 = time.monotonic()
            out = executor.run(StageInput("r", "t", "kernelbench", "execute", payload, built.artifacts, 3600))
            wall = time.monotonic() - t0
            d = out.detail
            ours = {
                "status": out.status.value,
                "wall_s": round(wall, 2),
                "reference_peak_bytes": d.get("metadata", {}).get("reference_peak_bytes"),
                "worker_growth_bytes": rss() - before,
                "runtime_ms": d.get("runtime"),
                "ref_runtime_ms": d.get("ref_runtime"),
                "reason": d.get("reason") or d.get("error"),
            }
            rows.append({"output_gib": gib, "shape": [rows_n, COLS], "anchor": base, "execute": ours})
            print(json.dumps(rows[-1]), flush=True)
    result = {
        "benchmark": "kernel_sizes",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_end": os.getloadavg()[0],
        },
        "trials": {"correct": CORRECT_TRIALS, "perf": PERF_TRIALS},
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kernel_sizes.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "kernel_sizes.md").write_text(markdown(result))
    return 0 if all(r["execute"]["status"] == "ok" for r in rows) else 1


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# Kernel judging at KernelBench's sizes (CPU backend)",
        "",
        f"{m['cpus']} CPUs, load average at the end {m['load_end']:.1f}; {result['trials']['correct']} "
        f"correctness trials and {result['trials']['perf']} timed calls per side; a C++ ReLU candidate.",
        "Anchor: KernelBench's evaluation in one plain process (allclose on whole outputs, one input "
        "set for timing). Execute stage: two jailed processes, outputs compared in the reference's "
        "process through the output window, fresh inputs per timed call.",
        "",
        "| output | anchor wall | anchor peak | execute wall (ratio) | reference process peak | worker growth | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        a, e = r["anchor"], r["execute"]
        aw = a.get("wall_s")
        ratio = f" ({e['wall_s'] / aw:.2f}x)" if aw else ""
        peak = f"{a['peak_bytes'] / GiB:.2f} GiB" if a.get("peak_bytes") else a.get("error", "failed")[:60]
        ref_peak = e["reference_peak_bytes"] or 0
        lines.append(
            f"| {r['output_gib']:g} GiB | {aw or 0:.1f} s | {peak} | {e['wall_s']:.1f} s{ratio} | "
            f"{ref_peak / GiB:.2f} GiB | {e['worker_growth_bytes'] / (1 << 20):.0f} MiB | {e['status']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
