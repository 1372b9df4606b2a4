"""The kernel toolchain's CUDA: found under CUDA_HOME (not only on PATH), named by readiness where
it is missing, and what the build jail sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrs.rewards import cuda_toolkit
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.toolchain import Toolchain
from tests.requirements import need


def toolkit(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return root


def test_cuda_is_found_under_cuda_home_and_given_to_the_build_jail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = toolkit(tmp_path / "cuda-13")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    tc = Toolchain(KernelSettings())
    tk = tc.cuda_toolkit()
    assert tk is not None and tk.nvcc == str(home / "bin" / "nvcc")
    env = tc.jail_env(build=True)
    assert env["CUDA_HOME"] == str(home) and f"{home}/bin" in env["PATH"].split(":")
    assert str(home) in tc.jail_mounts().ro_paths


def test_a_compile_worker_without_nvcc_is_not_ready_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("torch", "readiness first checks torch in the worker's interpreter (the 'kernels' extra)")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(cuda_toolkit, "DEFAULT_HOME", str(tmp_path / "no-usr-local-cuda"))
    s = KernelSettings(cuda_home=str(tmp_path / "also-nowhere"))
    tc = Toolchain(s)
    assert tc.cuda_toolkit() is None
    ok, why = tc.readiness(nvcc=True)
    assert not ok and "no CUDA compiler" in why and "DISTRS_KERNELS_CUDA_HOME" in why
    assert tc.readiness() == (True, "")  # the execute stage needs no compiler
    cpu = Toolchain(KernelSettings(device="cpu", cuda_home=s.cuda_home))
    assert cpu.readiness(nvcc=True) == (True, "")


def test_builds_find_the_cuda_library_headers_torch_brings() -> None:
    """ATen/cuda/CUDAContext.h includes cusparse.h, which a compiler-only toolkit lacks: a build
    must not fail for the service's missing header (the GPU check's candidates include it)."""
    need("torch", "the headers come with torch's CUDA wheels (the 'kernels' extra)")
    tc = Toolchain(KernelSettings())
    cpath = tc.jail_env(build=True).get("CPATH", "")
    assert any((Path(d) / "cusparse.h").exists() for d in cpath.split(":") if d), cpath
    assert "CPATH" not in tc.jail_env(build=False)
