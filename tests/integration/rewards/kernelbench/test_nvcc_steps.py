"""nvcc's steps run by the build jail (``nvcc_steps.py``) build what nvcc builds: the same object
(byte for byte, but for the name of nvcc's temporary file each run picks), the same dependency
file and, for a source with an error, the same messages and exit status. The commands run are
nvcc's own (its dry run's), the only change being each cicc deriving the module id itself
rather than reading cudafe++'s. What it does not split (one job, relocatable device code) is
left to nvcc. Real nvcc on small sources (no torch headers: seconds, not minutes)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from distrs.rewards.kernelbench.in_jail import nvcc_steps
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.toolchain import Toolchain
from tests.requirements import need

SCRIPT = Path(nvcc_steps.__file__)
KERNEL = r"""
#include <cstdint>
namespace { __device__ float twice(float v) { return 2.f * v; } }
__device__ int calls;
template <typename T> __global__ void scale(const T* x, T* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { y[i] = twice(x[i]); atomicAdd(&calls, 1); }
}
void launch(const float* x, float* y, int64_t n) { scale<float><<<(n + 255) / 256, 256>>>(x, y, n); }
"""
BROKEN = "__global__ void k(float* x) { x[0] = ; }\n"
# torch's flags for a .cu of load_inline (less its include paths)
FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "--expt-relaxed-constexpr"]
FLAGS += ["--compiler-options", "-fPIC", "-std=c++20"]
ARCHS = {
    "sm_90": ["-gencode=arch=compute_90,code=sm_90"],
    "sm_80+sm_90+ptx": [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ],
}
TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")


@pytest.fixture(scope="module")
def nvcc() -> str:
    tk = Toolchain(KernelSettings()).cuda_toolkit()  # the compile stage's own resolution of its nvcc
    path = tk.nvcc if tk is not None else "nvcc"
    need("nvcc", "the CUDA build steps are nvcc's", found=tk is not None, detail=path)
    need("g++", "nvcc's host compiler", found=shutil.which("g++"))
    return path


def env(tmp: Path, nvcc: str, jobs: int = 2) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp), "DISTRS_KB_NVCC": nvcc, "DISTRS_KB_NVCC_JOBS": str(jobs)}


def args(arch: str, name: str) -> list[str]:
    return ["-MD", "-MF", f"{name}.d", *FLAGS, *ARCHS[arch], "-c", "k.cu", "-o", f"{name}.o"]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_the_steps_build_what_nvcc_builds(tmp_path: Path, nvcc: str, arch: str) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    e = env(tmp_path, nvcc)
    subprocess.run([nvcc, *args(arch, "nvcc")], cwd=tmp_path, env=e, check=True)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        plan = nvcc_steps.plan_for(nvcc, args(arch, "steps"), e)
        runner = nvcc_steps.Runner(plan.env, 2)
        assert nvcc_steps.execute(plan, args(arch, "steps"), 2, runner) == 0
        for path in nvcc_steps.temporaries(plan):
            os.unlink(path)
    finally:
        os.chdir(cwd)
    ours, theirs = (tmp_path / "steps.o").read_bytes(), (tmp_path / "nvcc.o").read_bytes()
    assert TEMP_NAME.sub(b"T", ours) == TEMP_NAME.sub(b"T", theirs)  # same object, but a temp name
    assert (tmp_path / "steps.d").read_text() == (tmp_path / "nvcc.d").read_text().replace(
        "nvcc.o", "steps.o"
    )
    # nvcc's commands, each once: the host compile and fatbinary after both front ends
    ran = [" ".join(a) for a in runner.ran]
    for step in plan.steps:
        if step.kind == "cicc":
            assert " ".join(nvcc_steps.own_id(step.argv, plan.cicc_ids[step.index])) in ran
        elif step.kind == "preprocess":
            assert any(r.startswith(" ".join(step.argv)) for r in ran)
        elif step.kind not in ("rm", "deps"):
            assert " ".join(step.argv) in ran
    kinds = [s.kind for s in plan.steps]
    assert len(ran) == len(kinds) - kinds.count("rm") - kinds.count("deps")
    assert ran[-1] == " ".join(plan.steps[-1].argv)
    assert not list(tmp_path.glob("tmpxft_*"))  # nvcc's intermediates removed, as nvcc does


def test_a_compiler_error_reads_as_nvccs(tmp_path: Path, nvcc: str) -> None:
    (tmp_path / "k.cu").write_text(BROKEN)
    e = env(tmp_path, nvcc)
    argv = [*ARCHS["sm_90"], "-c", "k.cu", "-o", "k.o"]
    theirs = subprocess.run([nvcc, *argv], cwd=tmp_path, env=e, capture_output=True)
    ours = subprocess.run(
        [sys.executable, "-I", "-B", str(SCRIPT), *argv], cwd=tmp_path, env=e, capture_output=True
    )
    assert theirs.returncode != 0 and ours.returncode == theirs.returncode
    assert ours.stderr == theirs.stderr and b"expected an expression" in ours.stderr
    assert ours.stdout == theirs.stdout
    assert not list(tmp_path.glob("tmpxft_*"))


def test_what_it_does_not_split_is_left_to_nvcc(tmp_path: Path, nvcc: str) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    e = env(tmp_path, nvcc)
    with pytest.raises(nvcc_steps.Unsupported):
        nvcc_steps.plan_for(nvcc, ["-rdc=true", *ARCHS["sm_90"], "-c", "k.cu", "-o", "k.o"], e)
    with pytest.raises(nvcc_steps.Unsupported):
        nvcc_steps.plan_for(nvcc, [*ARCHS["sm_90"], "-E", "k.cu"], e)
    # one job: nvcc itself, same object as a plain nvcc run
    one = subprocess.run(
        [sys.executable, "-I", "-B", str(SCRIPT), *args("sm_90", "one")],
        cwd=tmp_path,
        env=env(tmp_path, nvcc, 1),
    )
    assert one.returncode == 0 and (tmp_path / "one.o").exists()
