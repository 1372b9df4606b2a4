"""Build admission across compile worker processes on one machine: the CPUs their builds hold
are counted together, and a worker killed while it holds CPUs (SIGKILL, no clean-up) gives them
back: the kernel drops its locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from distrs.rewards.kernelbench.admission import CpuSlots

ROOT = Path(__file__).resolve().parents[4]
HOLD = r"""
import sys, time
from distrs.rewards.kernelbench.admission import CpuSlots
got = CpuSlots(sys.argv[1], int(sys.argv[2])).acquire(int(sys.argv[3]), time.monotonic() + 30)
print("held" if got else "none", flush=True)
time.sleep(600)
"""


def holder(d: Path, capacity: int, need: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(d), str(capacity), str(need)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_workers_count_cpus_together_and_a_killed_one_gives_its_back(tmp_path: Path) -> None:
    a = holder(tmp_path, 3, 2)
    try:
        cpus = CpuSlots(str(tmp_path), 3)
        assert cpus.in_use() == 2
        assert cpus.acquire(2, time.monotonic() + 0.5) is None  # another worker holds two of three
        os.kill(a.pid, signal.SIGKILL)
        a.wait()
        got = cpus.acquire(2, time.monotonic() + 5)
        assert got is not None and cpus.in_use() == 2
        got.release()
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
