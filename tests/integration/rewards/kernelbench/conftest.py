"""The CPU tier of ``kernelbench``: the real jail, real torch, real builds (C++ CPU extensions).

Builds cost a minute or more of CPU each, so the tier shares them: every candidate uses one
``load_inline`` call (``tests/fixtures/kernel_problems.py``), and built modules are cached by
content (call, torch, compilers) under ``/var/tmp/distrs-kernels-cache``, as a compile pool's
shared volume would keep them; only the first run on a machine builds.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.kernelbench import CompileHandler, ExecuteHandler
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.sandbox import SandboxSettings
from distrs.sandbox.factory import probe_bwrap
from distrs.sandbox.local import BWRAP, LocalSandbox
from tests.fixtures.kernel_problems import HONEST, REFERENCE
from tests.requirements import need

CACHE_DIR = "/var/tmp/distrs-kernels-cache"
UID_BASE = 63200  # a range no other test uses
UID_COUNT = 8

pytestmark = pytest.mark.kernels


def kernel_settings(**kw: Any) -> KernelSettings:
    """The tier's settings: a CPU pool and the shared build cache, unless ``kw`` says otherwise
    (the GPU tier passes ``device="cuda"``)."""
    return KernelSettings(**{"device": "cpu", "cache_dir": CACHE_DIR, "compile_time_s": 1800.0, **kw})


@pytest.fixture(scope="session")
def kernel_sandbox() -> Iterator[LocalSandbox]:
    need("torch", "kernel builds and judging run torch (the 'kernels' extra: make install)")
    need("ninja", "torch's load_inline builds with ninja (the 'kernels' extra: make install)")
    with tempfile.TemporaryDirectory(prefix="distrs-kb-") as tmp:
        settings = SandboxSettings(
            workdir_base=str(Path(tmp) / "sbx"), uid_base=UID_BASE, uid_count=UID_COUNT
        )
        reason = probe_bwrap(settings)
        need(
            "bwrap jail",
            "untrusted kernels build and run in the jail",
            found=reason is None,
            detail=reason or "",
        )
        yield LocalSandbox(settings, BWRAP)


@pytest.fixture(scope="session")
def compiler(kernel_sandbox: LocalSandbox) -> CompileHandler:
    return CompileHandler(kernel_sandbox, kernel_settings())


@pytest.fixture(scope="session")
def executor(kernel_sandbox: LocalSandbox) -> ExecuteHandler:
    return ExecuteHandler(kernel_sandbox, kernel_settings())


def payload(candidate: str, **kw: Any) -> dict[str, Any]:
    return {
        "original_model_src": REFERENCE,
        "custom_model_src": candidate,
        "backend": "cpp",
        "num_perf_trials": 10,
        **kw,
    }


def stage_input(stage: str, p: dict[str, Any], artifacts: dict[str, str] | None = None) -> StageInput:
    return StageInput("r", "t", "kernelbench", stage, p, artifacts or {}, timeout_s=1800.0)


@pytest.fixture(scope="session")
def honest_artifacts(compiler: CompileHandler) -> dict[str, str]:
    out = compiler.run(stage_input("compile", payload(HONEST)))
    assert out.outcome == "next", out
    return out.artifacts


def execute(executor: ExecuteHandler, artifacts: dict[str, str], candidate: str, **kw: Any) -> StageOutput:
    return executor.run(stage_input("execute", payload(candidate, **kw), artifacts))
