"""The cuda type's timed runs in the real jail: each in a fresh session, so a program cannot
replay a result it cached on an earlier run. A host binary stands in for the CUDA program and
an empty file for the GPU device node (the execute stage needs one to be ready); the timing
path (the in-jail exec timer, the fresh sessions) is the same as on a GPU."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards import cuda
from distrs.rewards.base import StageInput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox.local import LocalSandbox

# The first run in a work dir sleeps 0.4 s and leaves its answer in ./cache and /tmp/cache; a run
# that finds either prints it at once.
CACHING = r"""
#include <cstdio>
#include <ctime>
#include <initializer_list>
static bool replay(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  long v; bool ok = std::fscanf(f, "%ld", &v) == 1; std::fclose(f);
  if (ok) std::printf("%ld\n", v);
  return ok;
}
int main() {
  long n; if (std::scanf("%ld", &n) != 1) return 1;
  if (replay("cache") || replay("/tmp/cache")) return 0;
  timespec t{0, 400000000}; nanosleep(&t, nullptr);
  for (const char* p : {"cache", "/tmp/cache"}) { FILE* f = std::fopen(p, "w"); if (f) { std::fprintf(f, "%ld", 2 * n); std::fclose(f); } }
  std::printf("%ld\n", 2 * n);
}
"""


@pytest.fixture
def caching_binary(tmp_path: Path) -> str:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    src, out = tmp_path / "c.cpp", tmp_path / "c"
    src.write_text(CACHING)
    subprocess.run(["g++", "-O1", "-o", str(out), str(src)], check=True)
    return base64.b64encode(out.read_bytes()).decode()


def execute(sb: LocalSandbox, dev: Path, binary: str, **extra: Any) -> Any:
    dev.mkdir(exist_ok=True)
    (dev / "nvidia0").touch()
    h = cuda.ExecuteHandler(sb, JudgeSettings(test_time_s=5), dev=str(dev))
    assert h.ready() == (True, "")
    payload = {"code": "x", "tests": [{"stdin": "21\n", "expected_stdout": "42\n"}], **extra}
    return h.run(StageInput("r", "t", "cuda", "execute", payload, {"binary": binary}, timeout_s=30))


def test_no_timed_run_replays_a_cache_left_by_an_earlier_run(
    bwrap_sandbox: LocalSandbox, caching_binary: str, tmp_path: Path
) -> None:
    out = execute(bwrap_sandbox, tmp_path / "dev", caching_binary, reference_time_s=0.1)
    assert out.status is Status.OK, out.detail
    case = out.detail["tests"][0]
    assert out.detail["timed_runs"] == 3 and case["timed_runs"] == 3
    assert out.detail["runs_by_clock"] == {"program": 4, "jail": 0}  # each from inside its jail
    assert case["time_s"] >= 0.4 and out.detail["run_time_s"] >= 0.4 and out.detail["speedup"] <= 0.25


def test_timed_runs_zero_charges_the_judged_run(
    bwrap_sandbox: LocalSandbox, caching_binary: str, tmp_path: Path
) -> None:
    out = execute(bwrap_sandbox, tmp_path / "dev", caching_binary, reference_time_s=0.1, timed_runs=0)
    assert out.status is Status.OK and out.detail["timed_runs"] == 0
    assert "timed_runs" not in out.detail["tests"][0] and out.detail["run_time_s"] >= 0.4
    assert out.detail["runs_by_clock"] == {"program": 1, "jail": 0}
