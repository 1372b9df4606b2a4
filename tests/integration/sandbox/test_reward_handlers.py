"""The judged reward handlers end to end on one machine (real compilers, real sandbox)."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards import cpp, cuda, cuda_toolkit
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.math_reward import MathSettings, VerifyHandler
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox.local import LocalSandbox
from tests.requirements import need

SETTINGS = JudgeSettings(test_time_s=2.0)
ADD_TESTS = [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "40 2\n", "expected_stdout": "42\n"}]
CPP_ADD = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"


def _inp(rt: str, stage: str, payload: dict[str, Any], artifacts: dict[str, str] | None = None) -> StageInput:
    return StageInput("r", "t", rt, stage, payload, artifacts or {}, timeout_s=60)


def cpp_judge(sb: LocalSandbox, code: str, **extra: Any) -> StageOutput:
    payload = {"code": code, "tests": ADD_TESTS, **extra}
    c = cpp.CompileHandler(sb, SETTINGS).run(_inp("cpp", "compile", payload))
    if c.outcome == "final":
        return c
    assert set(c.artifacts) >= {"binary"}
    return cpp.RunHandler(sb, SETTINGS).run(_inp("cpp", "run", payload, c.artifacts))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize(
    ("code", "status", "score"),
    [
        (CPP_ADD, Status.OK, 1.0),
        (
            "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a-b;}",
            Status.WRONG_ANSWER,
            0.0,
        ),
        (
            "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;if(a==1){std::cout<<3;}else{int*p=nullptr;*p=1;}}",
            Status.RUNTIME_ERROR,
            0.5,
        ),
        ("int main(){ return undeclared; }", Status.COMPILE_ERROR, 0.0),
        ("int main(){ while(true){} }", Status.TIMEOUT, 0.0),
    ],
)
def test_cpp_statuses(bwrap_sandbox: LocalSandbox, code: str, status: Status, score: float) -> None:
    out = cpp_judge(bwrap_sandbox, code, time_limit_s=1)
    assert out.status is status, out.detail
    assert out.score == score
    if status is Status.COMPILE_ERROR:
        assert "undeclared" in out.detail["compiler_output"]


def test_cpp_all_or_nothing(bwrap_sandbox: LocalSandbox) -> None:
    code = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<(a==1?3:0);}"
    assert cpp_judge(bwrap_sandbox, code).score == 0.5
    assert cpp_judge(bwrap_sandbox, code, scoring="all").score == 0.0


def test_python_statuses(bwrap_sandbox: LocalSandbox) -> None:
    h = PythonRunHandler(bwrap_sandbox, SETTINGS)

    def judge(code: str, **extra: Any) -> StageOutput:
        return h.run(_inp("python", "run", {"code": code, "tests": ADD_TESTS, **extra}))

    ok = judge("a, b = map(int, input().split())\nprint(a + b)")
    assert (ok.status, ok.score) == (Status.OK, 1.0)
    assert judge("print(0)").status is Status.WRONG_ANSWER
    crash = judge("raise ValueError('nope')")
    assert crash.status is Status.RUNTIME_ERROR and "ValueError" in crash.detail["tests"][0]["stderr"]
    assert judge("while True: pass", time_limit_s=0.5).status is Status.TIMEOUT
    syntax = judge("def (:")
    assert syntax.status is Status.COMPILE_ERROR and "SyntaxError" in syntax.detail["compiler_output"]
    late = judge("exec('def (:')")  # a syntax error raised while running stays a runtime error
    assert late.status is Status.RUNTIME_ERROR
    fl = judge("print(0.1 + 0.2)", tests=[{"stdin": "", "expected_stdout": "0.3"}], compare="float")
    assert fl.status is Status.OK
    assert (
        judge("print(1)", tests=[{"stdin": "", "expected_stdout": "1"}], compare="bogus").status
        is Status.INVALID
    )


@pytest.fixture
def math_handler(bwrap_sandbox: LocalSandbox) -> Iterator[VerifyHandler]:
    h = VerifyHandler(bwrap_sandbox, MathSettings(timeout_s=8))
    yield h
    h.close()


@pytest.mark.parametrize(
    ("completion", "truth", "status"),
    [
        ("The answer is $\\boxed{\\frac{1}{2}}$.", "0.5", Status.OK),
        ("so we get 1/2", "\\frac12", Status.OK),
        ("$\\boxed{\\dfrac{3}{4}}$", "3/4", Status.OK),
        ("$\\boxed{\\{1, 2, 3\\}}$", "\\{3,2,1\\}", Status.OK),
        ("$\\boxed{\\sqrt{2}/2}$", "\\frac{\\sqrt{2}}{2}", Status.OK),
        ("$\\boxed{(0, 1]}$", "(0,1]", Status.OK),
        ("$\\boxed{\\frac{2}{3}}$", "0.5", Status.WRONG_ANSWER),
        ("$\\boxed{\\{1, 2\\}}$", "\\{1,2,3\\}", Status.WRONG_ANSWER),
        ("I could not solve it.", "7", Status.WRONG_ANSWER),
    ],
)
def test_math_notations(math_handler: VerifyHandler, completion: str, truth: str, status: Status) -> None:
    out = math_handler.run(_inp("math", "verify", {"completion": completion, "ground_truth": truth}))
    assert out.status is status, out.detail
    assert out.score == (1.0 if status is Status.OK else 0.0)


def test_math_hang_times_out_and_recovers(math_handler: VerifyHandler) -> None:
    evil = "$\\boxed{9^{9^{9^{9^{9}}}}}$"
    out = math_handler.run(
        StageInput("r", "t", "math", "verify", {"completion": evil, "ground_truth": "1"}, timeout_s=3)
    )
    assert out.status is Status.TIMEOUT
    again = math_handler.run(_inp("math", "verify", {"completion": "$\\boxed{2}$", "ground_truth": "2"}))
    assert again.status is Status.OK


CUDA_ADD = r"""
#include <cstdio>
__global__ void add(int n, const float* a, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() {
  int n; if (scanf("%d", &n) != 1) return 1;
  float *a, *b, *c;
  cudaMallocManaged(&a, n * sizeof(float)); cudaMallocManaged(&b, n * sizeof(float));
  cudaMallocManaged(&c, n * sizeof(float));
  for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2 * i; }
  add<<<(n + 255) / 256, 256>>>(n, a, b, c);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(e)); return 2; }
  double s = 0; for (int i = 0; i < n; i++) s += c[i];
  printf("%.1f\n", s);
  return 0;
}
"""
CUDA_TESTS = [{"stdin": "1000\n", "expected_stdout": "1498500.0\n"}]


def test_cuda_compiles_real_kernel_and_ships_binary(
    bwrap_sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvcc needs no GPU. As on a standard install, it is found under CUDA_HOME only: the
    worker's PATH and the jail's lack it, and the jail runs it by absolute path."""
    found = cuda_toolkit.resolve("nvcc", env={"PATH": ""})
    need("nvcc", "the cuda type compiles with the CUDA toolkit (scripts/system-deps.sh)", found=found)
    assert found is not None
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("CUDA_HOME", os.path.dirname(os.path.dirname(found.nvcc)))
    handler = cuda.CompileHandler(bwrap_sandbox, SETTINGS)
    assert handler.ready() == (True, "") and handler.compiler()[0] == found.nvcc
    out = handler.run(
        StageInput("r", "t", "cuda", "compile", {"code": CUDA_ADD, "tests": CUDA_TESTS}, timeout_s=120)
    )
    assert out.outcome == "next", out.detail
    binary = base64.b64decode(out.artifacts["binary"])
    assert binary[:4] == b"\x7fELF" and len(out.artifacts["binary"]) < 16 << 20
    bad = cuda.CompileHandler(bwrap_sandbox, SETTINGS).run(
        StageInput(
            "r", "t", "cuda", "compile", {"code": "__global__ void k( {", "tests": CUDA_TESTS}, timeout_s=120
        )
    )
    assert bad.status is Status.COMPILE_ERROR and bad.detail["compiler_output"]


@pytest.mark.gpu
@pytest.mark.skipif(not cuda.gpu_devices(), reason="needs an NVIDIA GPU")
def test_cuda_execute_on_gpu(bwrap_sandbox: LocalSandbox) -> None:
    payload = {"code": CUDA_ADD, "tests": CUDA_TESTS, "reference_time_s": 10.0}
    c = cuda.CompileHandler(bwrap_sandbox, SETTINGS).run(
        StageInput("r", "t", "cuda", "compile", payload, timeout_s=120)
    )
    assert c.outcome == "next", c.detail
    h = cuda.ExecuteHandler(bwrap_sandbox, JudgeSettings(test_time_s=30))
    assert h.ready() == (True, "")
    out = h.run(StageInput("r", "t", "cuda", "execute", payload, c.artifacts, timeout_s=60))
    assert out.status is Status.OK, out.detail
    assert out.detail["speedup"] > 1 and out.score > 0.75
    wrong = {**payload, "tests": [{"stdin": "1000\n", "expected_stdout": "0\n"}]}
    w = h.run(StageInput("r", "t", "cuda", "execute", wrong, c.artifacts, timeout_s=60))
    assert w.status is Status.WRONG_ANSWER and w.score == 0.0
