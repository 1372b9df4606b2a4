"""Settings of the ``kernelbench`` reward type (``DISTRS_KERNELS_*``), built once per worker (the
type's descriptor names the class; the registry passes one instance to both stage handlers)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KernelSettings(BaseSettings):
    """How kernels are built on compile workers and judged on execute workers."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_KERNELS_", extra="ignore")

    python: str = Field(
        default="",
        description="Interpreter with torch and ninja (the 'kernels' extra); empty = the worker's own.",
    )
    cuda_arch_list: str = Field(
        default="9.0",
        description="TORCH_CUDA_ARCH_LIST the compile stage builds for: the execute pool's GPUs "
        "(9.0 for H100/H200, 8.0 for A100; several separated by ';').",
    )
    cuda_home: str = Field(
        default="",
        description="CUDA toolkit the compile stage builds with (its bin/nvcc); empty = $CUDA_HOME, "
        "else /usr/local/cuda, else nvcc on the worker's PATH. Readiness names what is missing.",
    )
    build_jobs: int = Field(
        default=2,
        ge=1,
        description="Parallel compiler jobs per build (MAX_JOBS for ninja), and the CPUs a build is admitted "
        "with (at most build_cpus).",
    )
    compile_time_s: float = Field(
        default=600.0,
        gt=0,
        description="Wall limit of one build, counted from its admission, and of the candidate's own import "
        "(each capped by the stage budget). A build cut by it has used less than its CPU limit: the machine "
        "gave it too little CPU, which ends the request internal_error, not timeout.",
    )
    compile_cpu_s: float = Field(
        default=600.0,
        gt=0,
        description="CPU time one build's compilers may use together: a build that needs more is the "
        "candidate's timeout (CPU time is the same on a busy machine; wall time is not).",
    )
    build_cpus: int = Field(
        default=0,
        ge=0,
        description="CPUs the builds of this machine may use at once (each build takes build_jobs of them "
        "and waits while they are taken); 0 = the cgroup's CPU quota where set, else the CPUs this "
        "process may run on.",
    )
    build_cpus_dir: str = Field(
        default="",
        description="Directory where the compile workers of a machine count the CPUs their builds hold "
        "(lock files); empty = TMPDIR/distrs-build-cpus-UID.",
    )
    nvcc_split: bool = Field(
        default=True,
        description="Run nvcc's own steps in the build jail with its device and host chains at once "
        "(nvcc_steps.py); false = one nvcc process per .cu file, as load_inline does.",
    )
    prestart: bool = Field(
        default=True,
        description="Start the next request's jails (interpreters with torch imported) while the compile "
        "worker is idle; false = each at its request.",
    )
    compile_memory_mb: int = Field(
        default=16384, gt=0, description="Writable memory of a build (nvcc and g++)."
    )
    cache_mb: int = Field(
        default=512, ge=0, description="In-memory cache of recent builds per compile worker."
    )
    cache_dir: str = Field(
        default="",
        description="Directory of a content-addressed build cache shared by compile workers (a volume); "
        "empty = memory only.",
    )
    pch: bool = Field(
        default=True,
        description="Precompile torch/extension.h per set of extra C++ flags (in the background, once) and "
        "let builds use it; g++ ignores a header that does not match, so modules are the same either way.",
    )
    execute_memory_mb: int = Field(default=16384, gt=0, description="Writable memory of one judging process.")
    window_slot_mb: int = Field(
        default=64,
        ge=1,
        le=1024,
        description="One slot of the window through which the candidate hands its outputs to the "
        "reference's process for comparison (two slots; page-locked on a GPU).",
    )
    device: str = Field(
        default="cuda",
        pattern="^(cuda|cpu)$",
        description="What this execute worker owns: one GPU ('cuda') or only CPUs ('cpu': CPU extensions "
        "of backend 'cpp'; CUDA requests then end internal_error).",
    )
    trial_time_s: float = Field(
        default=30.0, gt=0, description="Wall limit of one reply of a judging process."
    )
    startup_time_s: float = Field(
        default=120.0,
        gt=0,
        description="Wall limit for a judging process to import torch and build its model.",
    )
    spot_checks: int = Field(
        default=3, ge=1, description="Timed calls whose full output is re-checked against the reference."
    )
    excessive_speedup: float = Field(
        default=10.0, gt=1, description="Speedups above this are flagged (KernelBench's threshold)."
    )
    threads: int = Field(default=1, ge=1, description="torch CPU threads in a judging process (device cpu).")
