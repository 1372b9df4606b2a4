"""Settings of the judged program types (``cpp``, ``python``, ``cuda`` and the languages of
``languages.yaml``): compilers, interpreters and default limits (``DISTRS_JUDGE_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from distrs.rewards.base import MiB


class JudgeSettings(BaseSettings):
    """Compilers, interpreters and default limits for judged types (``DISTRS_JUDGE_*``)."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_JUDGE_", extra="ignore")

    cxx: str = Field(default="g++", description="C++ compiler.")
    cxx_flags: list[str] = Field(
        default_factory=lambda: ["-std=c++17", "-O2", "-pipe"], description="C++ compiler flags."
    )
    cxx_pch: bool = Field(
        default=True,
        description="Compile C++ with bits/stdc++.h precompiled for the compiler and exact flags "
        "(distrs/rewards/cxx_pch.py): used only by a program that includes it first with the same "
        "macros, so every program compiles to what it would without; 0 turns it off.",
    )
    cxx_pch_dir: str = Field(
        default="",
        description="Where a worker makes precompiled headers the image lacks (in the background); "
        "empty = TMPDIR/distrs-pch-UID, shared by this user's workers on the machine.",
    )
    cxx_pch_image_dir: str = Field(
        default="/usr/local/lib/distrs/pch",
        description="Precompiled headers made at image build (python -m distrs.rewards.cxx_pch DIR), "
        "looked up first.",
    )
    nvcc: str = Field(
        default="nvcc",
        description="CUDA compiler: an absolute path, or a name looked up in the bin of "
        "DISTRS_JUDGE_CUDA_HOME, $CUDA_HOME and /usr/local/cuda, then on the worker's PATH; the "
        "jail runs what is found by absolute path (distrs/rewards/cuda_toolkit.py).",
    )
    cuda_home: str = Field(default="", description="CUDA toolkit to find nvcc in first; empty = $CUDA_HOME.")
    nvcc_flags: list[str] = Field(
        default_factory=lambda: [
            "-O2",
            "-gencode=arch=compute_80,code=[sm_80,compute_80]",
            "-gencode=arch=compute_90,code=sm_90",
        ],
        description="nvcc flags (targets A100 and H100; PTX lets newer GPUs JIT).",
    )
    python: str = Field(default="", description="Interpreter for the python type; empty = the worker's own.")
    python_fork_server: bool = Field(
        default=True,
        description="Run the python type's test cases through a fork server: one jail and one "
        "interpreter start per request and a fork per case, instead of a jail and an interpreter "
        "per case (the same verdicts; see docs/sandbox.md).",
    )
    python_zygote: bool = Field(
        default=True,
        description="With the fork server: fork each request's server, in fresh namespaces, from "
        "a warm zygote started once per worker instead of starting a jail and an interpreter per "
        "request (root workers and non-root workers in a user namespace of their own, the chart's "
        'default; see docs/sandbox.md "Python zygote").',
    )
    compile_time_s: float = Field(
        default=60.0,
        gt=0,
        description="Compile wall limit, and the most a payload's compile_time_limit_s (/run_code's "
        "compile_timeout) is honoured up to (capped by the stage).",
    )
    compile_memory_mb: int = Field(default=4096, gt=0, description="Compiler address-space limit.")
    compile_cache_mb: int = Field(
        default=256, ge=0, description="Per compile worker: size of the cache of recent compile outcomes."
    )
    test_time_s: float = Field(
        default=10.0, gt=0, description="Default wall limit per test case (when the payload names none)."
    )
    max_test_time_s: float = Field(
        default=60.0,
        gt=0,
        description="Largest wall limit per test case a payload's time_limit_s (/run_code's "
        "run_timeout) is honoured up to; a larger request is cut to it and the result says so. "
        "The stage's timeout_s (pipelines) bounds it too.",
    )
    timed_runs: int = Field(
        default=3,
        ge=0,
        le=10,
        description="cuda with reference_time_s: timed re-runs of each passed case, each in a fresh "
        "session and judged; the case is charged its fastest (distrs/rewards/judge/timing.py). A "
        "payload's timed_runs overrides it; 0 charges the one judged run.",
    )
    exec_timer: bool = Field(
        default=True,
        description="cuda: time each run from inside its jail, from the program's exec to its exit "
        "(distrs/sandbox/exec_timer.py), so the jail's own start is not charged; 0 times the whole "
        "jail on the host's clock.",
    )
    memory_mb: int = Field(default=1024, gt=0, description="Default memory limit per test case.")
    max_memory_mb: int = Field(
        default=4096, gt=0, description="Largest memory limit a payload's memory_limit_mb may ask for."
    )
    max_tests: int = Field(default=256, ge=1, description="Most test cases per request.")
    max_code_bytes: int = Field(default=512 * 1024, ge=1, description="Largest accepted source.")
    output_bytes: int = Field(default=4 * MiB, ge=1024, description="Captured stdout cap per test case.")
