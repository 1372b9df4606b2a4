"""Sandbox benchmark: overhead per run against a bare subprocess, and run-stage throughput.

1. **Overhead per run** — the same trivial program (``/bin/true``) started ``--runs`` times,
   interleaved: (a) bare ``subprocess.run`` with captured output, (b) ``Session.run`` in one
   open sandbox session (bwrap + setpriv (as root) + prlimit + capture loop), (c) a fresh
   session per run (work dir + uid reservation included, as one test case of a request costs).
   Overhead = median(b or c) - median(a). Target: <= 15 ms median.
2. **Run-stage throughput** — whole ``run``-stage requests (payload parsing, fresh session,
   one test case, judging) for trivial programs: a compiled C++ ``a+b`` and the same in Python,
   with 2 handler threads (the machine has 2 cores), reported as requests per second.

    .venv/bin/python benchmarks/sandbox.py          # writes benchmarks/results/sandbox.{json,md}
    .venv/bin/python benchmarks/sandbox.py --quick  # fewer runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distrs.core.model import Status  # noqa: E402
from distrs.rewards.base import StageInput  # noqa: E402
from distrs.rewards.cpp import CompileHandler, RunHandler  # noqa: E402
from distrs.rewards.judge.settings import JudgeSettings  # noqa: E402
from distrs.rewards.python_reward import PythonRunHandler  # noqa: E402
from distrs.sandbox import Limits, Sandbox, SandboxSettings, create_sandbox  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
TARGET_OVERHEAD_MS = 15.0
TESTS = [{"stdin": "1 2\n", "expected_stdout": "3\n"}]
CPP = '#include <cstdio>\nint main(){long a,b;if(scanf("%ld %ld",&a,&b)!=2)return 1;printf("%ld\\n",a+b);}\n'
PY = "a, b = map(int, input().split())\nprint(a + b)\n"


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1e3, 3),
        "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1e3, 3),
        "min_ms": round(xs[0] * 1e3, 3),
    }


def overhead(sb: Sandbox, runs: int) -> dict[str, Any]:
    bare, same, fresh = [], [], []
    lim = Limits(wall_s=10)
    with sb.session() as s:
        for _ in range(5):  # warm caches
            s.run(["true"], limits=lim)
            subprocess.run(["true"], capture_output=True, check=True)
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(["true"], capture_output=True, check=True)
            bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = s.run(["true"], limits=lim)
            same.append(time.perf_counter() - t)
            assert r.ok
            t = time.perf_counter()
            with sb.session() as s2:
                assert s2.run(["true"], limits=lim).ok
            fresh.append(time.perf_counter() - t)
    b, a, f = _ms(bare), _ms(same), _ms(fresh)
    return {
        "runs": runs,
        "bare_subprocess": b,
        "sandbox_run": a,
        "sandbox_fresh_session_run": f,
        "overhead_median_ms": round(a["median_ms"] - b["median_ms"], 3),
        "overhead_fresh_session_median_ms": round(f["median_ms"] - b["median_ms"], 3),
        "target_ms": TARGET_OVERHEAD_MS,
    }


def throughput(name: str, handler: Any, inp: StageInput, n: int, threads: int) -> dict[str, Any]:
    out = handler.run(inp)
    assert out.status is Status.OK, out.detail
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        statuses = list(ex.map(lambda _: handler.run(inp).status, range(n)))
    dt = time.perf_counter() - t
    assert all(s is Status.OK for s in statuses)
    return {
        "program": name,
        "requests": n,
        "threads": threads,
        "seconds": round(dt, 3),
        "per_s": round(n / dt, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.quick:
        args.runs, args.requests = 50, 40
    sb = create_sandbox(SandboxSettings())
    settings = JudgeSettings()
    res: dict[str, Any] = {
        "benchmark": "sandbox",
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "euid": os.geteuid(),
            "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        },
        "isolation": sb.isolation,
        "overhead": overhead(sb, args.runs),
    }
    payload = {"code": CPP, "tests": TESTS}
    c = CompileHandler(sb, settings).run(StageInput("b", "bench", "cpp", "compile", payload, timeout_s=120))
    assert c.outcome == "next", c.detail
    res["throughput"] = [
        throughput(
            "cpp a+b (compiled)",
            RunHandler(sb, settings),
            StageInput("b", "bench", "cpp", "run", payload, c.artifacts, 60),
            args.requests,
            args.threads,
        ),
        throughput(
            "python a+b",
            PythonRunHandler(sb, settings),
            StageInput("b", "bench", "python", "run", {"code": PY, "tests": TESTS}, {}, 60),
            args.requests,
            args.threads,
        ),
    ]
    res["host"]["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    ov = res["overhead"]
    res["meets_target"] = ov["overhead_median_ms"] <= TARGET_OVERHEAD_MS
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sandbox.json").write_text(json.dumps(res, indent=2) + "\n")
    md = [
        "# Sandbox benchmark",
        "",
        f"Isolation: `{res['isolation']}`; {os.cpu_count()} CPUs; euid {os.geteuid()}; "
        f"{ov['runs']} interleaved runs of `/bin/true`; 1-min load average "
        f"{res['host']['loadavg_1m_at_start']} → {res['host']['loadavg_1m_at_end']} (shared machine).",
        "",
        "| variant | median ms | p90 ms | min ms |",
        "|---|---|---|---|",
        *(
            f"| {k} | {ov[k]['median_ms']} | {ov[k]['p90_ms']} | {ov[k]['min_ms']} |"
            for k in ("bare_subprocess", "sandbox_run", "sandbox_fresh_session_run")
        ),
        "",
        f"Overhead per run (median, same session): **{ov['overhead_median_ms']} ms**; with a fresh "
        f"session per run: **{ov['overhead_fresh_session_median_ms']} ms** "
        f"(target <= {TARGET_OVERHEAD_MS:g} ms: {'met' if res['meets_target'] else 'NOT met'}).",
        "",
        "## Run-stage throughput (one test case per request)",
        "",
        "| program | requests | threads | seconds | requests/s |",
        "|---|---|---|---|---|",
        *(
            f"| {t['program']} | {t['requests']} | {t['threads']} | {t['seconds']} | {t['per_s']} |"
            for t in res["throughput"]
        ),
        "",
    ]
    (args.out / "sandbox.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
