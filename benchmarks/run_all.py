"""Run every benchmark script in this folder, one after another (``make bench``).

Each script writes ``benchmarks/results/<name>.json`` and ``.md``; this runner only sequences
them and reports which failed, so one broken benchmark does not hide the others' figures.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = [
    "proxy_load",
    "short_rewards",
    "sandbox",
    "client",
    "scaling",
    "sim_vs_live",
    "placement",
    "recovery",
    "compile",
    "cuda_timing",
    "sessions",
]


def main() -> int:
    only = set(sys.argv[1:])
    scripts = [HERE / f"{n}.py" for n in ORDER if (HERE / f"{n}.py").exists() and (not only or n in only)]
    failed = []
    for s in scripts:
        t0 = time.monotonic()
        print(f"== {s.stem}", flush=True)
        rc = subprocess.call([sys.executable, str(s)], cwd=HERE.parent)
        print(f"== {s.stem}: rc={rc} in {time.monotonic() - t0:.0f}s", flush=True)
        if rc != 0:
            failed.append(s.stem)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
