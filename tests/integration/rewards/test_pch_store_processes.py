"""PCH built once under concurrency: several worker processes sharing a precompiled-header root
ask for the same key at once; exactly one precompile runs and every process gets the same
complete header. A claimer killed mid-build (SIGKILL: no cleanup of its own) does not block the
key: the next process takes its claim over, removes its half-made build and makes the header."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GCH_BYTES = 8 << 20

# One worker process: a store on ROOT_DIR whose precompile logs its start, waits for a go file
# (or DELAY_S) and writes an 8 MiB header in two halves; prints what get(wait=True) answered.
WORKER = r"""
import os, sys, time
from pathlib import Path
from distrs.rewards.pch_store import PchStore

root, log, go, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

def precompile(flags, out):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    (out / "bits").mkdir()
    with open(out / "bits" / "stdc++.h.gch", "wb") as f:
        f.write(b"\0" * (GCH_BYTES // 2))
        f.flush()
        end = time.monotonic() + delay
        while time.monotonic() < end and not os.path.exists(go):
            time.sleep(0.05)
        f.write(b"\0" * (GCH_BYTES // 2))
    return True

while not os.path.exists(go + ".start"):
    time.sleep(0.01)
d = PchStore(root, "gcc-1", precompile, header="bits/stdc++.h", kind="t/1").get(["-O2"], wait=True)
size = os.path.getsize(os.path.join(d, "bits", "stdc++.h.gch")) if d else -1
print(d, size)
""".replace("GCH_BYTES", str(GCH_BYTES))


def worker(tmp: Path, delay_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(tmp / "pch"), str(tmp / "log"), str(tmp / "go"), str(delay_s)]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], env=env, stdout=subprocess.PIPE, text=True, cwd=tmp
    )


def starts(tmp: Path) -> list[str]:
    log = tmp / "log"
    return log.read_text().split() if log.exists() else []


def test_workers_asking_at_once_make_one_header_and_all_get_it(tmp_path: Path) -> None:
    procs = [worker(tmp_path, delay_s=2.0) for _ in range(4)]
    (tmp_path / "go.start").touch()
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(starts(tmp_path)) == 1  # one precompile for the key across the four processes
    assert len({o[0] for o in outs}) == 1 and all(o[1] == str(GCH_BYTES) for o in outs), outs
    assert [p.name for p in (tmp_path / "pch").iterdir() if p.name.startswith(".")] == []


def test_a_claimer_killed_mid_build_does_not_block_the_key(tmp_path: Path) -> None:
    first = worker(tmp_path, delay_s=600.0)
    (tmp_path / "go.start").touch()
    deadline = time.monotonic() + 30
    while not starts(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(starts(tmp_path)) == 1  # it holds the claim, half its header written
    second = worker(tmp_path, delay_s=600.0)
    time.sleep(1.0)
    assert len(starts(tmp_path)) == 1  # the second waits on the live claim, builds nothing
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 30
    while len(starts(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    (tmp_path / "go").touch()
    out = second.communicate(timeout=60)[0].split()
    assert starts(tmp_path)[1] == str(second.pid)  # the survivor took the claim over and built
    assert out[1] == str(GCH_BYTES)
    assert sorted(p.name for p in (tmp_path / "pch").iterdir()) == [Path(out[0]).name]  # nothing half-made
