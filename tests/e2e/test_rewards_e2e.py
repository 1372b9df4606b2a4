"""Judged reward types through the running service: proxy + real stage workers + sandbox.

A trainer submits cpp/python/math/cuda requests over HTTP; compile, run, verify (and, where a
GPU exists, execute) workers judge them in the sandbox. Hostile programs must not take a worker
down or leak its token.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from distrs.rewards.cuda import gpu_devices
from distrs.sandbox import SandboxSettings
from distrs.sandbox.factory import probe_bwrap
from tests.fixtures.batches import submit_and_wait
from tests.fixtures.service import WORKER, Service, free_port, running_service
from tests.integration.sandbox.conftest import assert_no_survivors
from tests.requirements import need


@pytest.fixture(autouse=True, scope="module")
def _needs_gpp_and_the_jail() -> None:
    need("g++", "the cpp reward compiles with it; make system-deps installs it", found=shutil.which("g++"))
    reason = probe_bwrap(SandboxSettings())
    need("bubblewrap jail", "every judged reward runs in it", found=reason is None, detail=reason or "")


ADD = [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "40 2\n", "expected_stdout": "42\n"}]
CPP_OK = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"
CPP_WRONG = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<'\\n';}\n"
CPP_CRASH = "#include <cstdlib>\nint main(){ std::abort(); }\n"
CPP_NOCOMPILE = "int main() { return missing_symbol; }\n"
CPP_LOOP = "int main(){ volatile long x = 0; while (true) { x++; } }\n"
PY_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
PY_WRONG = "print(7)\n"
PY_CRASH = "import sys\nsys.exit(5)\n"
PY_NOCOMPILE = "def f(:\n"
PY_LOOP = "while True:\n    pass\n"

CUDA_OK = r"""
#include <cstdio>
__global__ void sq(int* v) { v[threadIdx.x] = threadIdx.x * threadIdx.x; }
int main() {
  int* v; cudaMallocManaged(&v, 32 * sizeof(int));
  sq<<<1, 32>>>(v);
  if (cudaDeviceSynchronize() != cudaSuccess) return 2;
  long s = 0; for (int i = 0; i < 32; i++) s += v[i];
  printf("%ld\n", s);
}
"""
CUDA_TESTS = [{"stdin": "", "expected_stdout": "10416\n"}]


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    workers = {"compile": 1, "run": 1, "verify": 1}
    with running_service(workers=workers) as s:
        yield s


def judge(svc: Service, items: list[tuple[str, dict[str, Any]]], wait_s: float = 90) -> list[dict[str, Any]]:
    """Submit one batch of (reward_type, payload) and wait for all results, in order."""
    c = svc.client(timeout=wait_s + 10)
    batch, body = submit_and_wait(c, "e2e", items, wait_s)
    assert body.get("complete"), f"batch incomplete: {body}\n{svc.logs()}"
    by_id = {x["request_id"]: x for x in body["results"]}
    return [by_id[f"{batch}-{i}"] for i in range(len(items))]


def _status_score(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(r["status"], r["score"]) for r in results]


def test_cpp_programs(svc: Service) -> None:
    items = [
        ("cpp", {"code": code, "tests": ADD, "time_limit_s": 1})
        for code in (CPP_OK, CPP_WRONG, CPP_CRASH, CPP_NOCOMPILE, CPP_LOOP)
    ]
    res = judge(svc, items)
    assert _status_score(res) == [
        ("ok", 1.0),
        ("wrong_answer", 0.0),
        ("runtime_error", 0.0),
        ("compile_error", 0.0),
        ("timeout", 0.0),
    ], res
    assert [s["name"] for s in res[0]["stages"]] == ["compile", "run"]
    assert [s["name"] for s in res[3]["stages"]] == ["compile"]  # ended at compile


def test_python_programs(svc: Service) -> None:
    items = [
        ("python", {"code": code, "tests": ADD, "time_limit_s": 1})
        for code in (PY_OK, PY_WRONG, PY_CRASH, PY_NOCOMPILE, PY_LOOP)
    ]
    items.append(("python", {"code": PY_OK, "tests": [*ADD, {"stdin": "1 1\n", "expected_stdout": "3"}]}))
    items.append(("python", {"code": PY_OK, "tests": "nope"}))
    res = judge(svc, items)
    assert _status_score(res[:5]) == [
        ("ok", 1.0),
        ("wrong_answer", 0.0),
        ("runtime_error", 0.0),
        ("compile_error", 0.0),
        ("timeout", 0.0),
    ], res
    assert res[5]["status"] == "wrong_answer" and res[5]["score"] == pytest.approx(2 / 3)
    assert res[6]["status"] == "invalid" and res[6]["detail"]["error"]["field"] == "tests"


def test_math_notations(svc: Service) -> None:
    cases = [
        ("Thus $\\boxed{\\frac{1}{2}}$.", "0.5", "ok"),
        ("The answer is 3/4", "\\frac{3}{4}", "ok"),
        ("$\\boxed{\\{1,2,3\\}}$", "\\{3, 1, 2\\}", "ok"),
        ("$\\boxed{2\\sqrt{2}}$", "\\sqrt{8}", "ok"),
        ("$\\boxed{\\frac{1}{3}}$", "0.5", "wrong_answer"),
        ("$\\boxed{\\{1,2\\}}$", "\\{1,2,3\\}", "wrong_answer"),
        ("no idea", "4", "wrong_answer"),
    ]
    res = judge(svc, [("math", {"completion": c, "ground_truth": g}) for c, g, _ in cases])
    assert [r["status"] for r in res] == [want for *_, want in cases], res
    assert [r["score"] for r in res] == [1.0 if want == "ok" else 0.0 for *_, want in cases]


@pytest.mark.gpu  # nvcc comes with the CUDA toolkit, on GPU machines
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_compiles_with_nvcc_and_waits_for_a_gpu(svc: Service) -> None:
    res = judge(svc, [("cuda", {"code": "__global__ void k( {", "tests": CUDA_TESTS})], wait_s=120)
    assert res[0]["status"] == "compile_error" and res[0]["detail"]["compiler_output"]
    # A good kernel compiles and moves on to the execute stage (no GPU worker here: it waits).
    c = svc.client()
    batch = uuid.uuid4().hex[:8]
    c.post("/v1/batches", json={"task": "cu", "batch_id": batch, "size": 1})
    r = c.post(
        "/v1/requests",
        json={
            "task": "cu",
            "batch_id": batch,
            "request_id": batch,
            "reward_type": "cuda",
            "payload": {"code": CUDA_OK, "tests": CUDA_TESTS},
        },
    )
    assert r.status_code == 202
    deadline = time.monotonic() + 120
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        state = c.get(f"/v1/requests/cu/{batch}").json()
        if state.get("stage") == "execute" or state.get("state") == "done":
            break
        time.sleep(0.2)
    assert state.get("stage") == "execute" and state["state"] == "queued", state


@pytest.mark.gpu  # depends on the GPU's presence: runs where there is none
def test_execute_worker_without_gpu_is_not_ready(svc: Service) -> None:
    if gpu_devices():
        pytest.skip("this host has a GPU")
    port = free_port()
    p = svc.start_worker("execute", "--reward-types", "cuda", "--health-port", str(port))
    try:
        deadline = time.monotonic() + 30
        r = None
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert r is not None and r.status_code == 503
        assert "no NVIDIA GPU" in r.json()["reason"]
        assert p.poll() is None  # it waits for a GPU rather than failing requests or exiting
    finally:
        svc.kill_worker(len(svc.workers) - 1)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="needs an NVIDIA GPU")
def test_cuda_executes_on_gpu(svc: Service) -> None:
    svc.start_worker("execute", "--reward-types", "cuda")
    res = judge(svc, [("cuda", {"code": CUDA_OK, "tests": CUDA_TESTS, "reference_time_s": 30.0})], wait_s=180)
    assert res[0]["status"] == "ok" and res[0]["score"] > 0.5, res
    assert [s["name"] for s in res[0]["stages"]] == ["compile", "execute"]


HOSTILE = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "kill parent": "import os, signal\nfor p in (os.getppid(), 1, -1):\n"
    "    try:\n        os.kill(p, signal.SIGKILL)\n    except OSError:\n        pass\nprint(3)\nprint(42)\n",
    "daemon": "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.execvp('sleep', ['sleep', '7777.5'])\n    os._exit(0)\nprint(7)\n",
    "token": "import glob, os\nseen = repr(dict(os.environ))\nfor p in glob.glob('/proc/*/environ'):\n"
    "    try:\n        seen += open(p, 'rb').read().decode(errors='replace')\n    except OSError:\n        pass\n"
    f"print('LEAK' if {WORKER!r} in seen else 'clean')\n",
}


@pytest.mark.slow
def test_hostile_programs_leave_workers_serving(svc: Service) -> None:
    items = [("python", {"code": code, "tests": ADD, "time_limit_s": 2}) for code in HOSTILE.values()]
    res = judge(svc, items, wait_s=120)
    assert all(r["status"] != "internal_error" for r in res), res
    assert "LEAK" not in str(res[3]["detail"]) and "clean" in str(res[3]["detail"])
    assert all(p.poll() is None for p in svc.workers[:3]), svc.logs()  # compile, run, verify
    assert_no_survivors("7777.5")  # the detached daemon died with its jail
    assert _status_score(judge(svc, [("python", {"code": PY_OK, "tests": ADD})])) == [("ok", 1.0)]
