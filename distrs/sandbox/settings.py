"""Sandbox settings, read from ``DISTRS_SANDBOX_*`` environment variables."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1 << 20


class SandboxSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTRS_SANDBOX_", extra="ignore")

    backend: str = Field(
        default="auto",
        description="bwrap | rlimits | auto (bwrap; rlimits only when allow_degraded is set).",
    )
    allow_degraded: bool = Field(
        default=False,
        description="Opt in to the rlimits-only sandbox (no namespaces) where bwrap cannot build "
        "its jail. Off by default: the worker then stays not ready and runs no untrusted code.",
    )
    workdir_base: str = Field(
        default=str(Path(tempfile.gettempdir()) / "distrs-sandbox"),
        description="Directory holding the per-run private work dirs.",
    )
    uid_base: int = Field(
        default=61000, ge=1000, description="First uid sandboxed programs run as (root only)."
    )
    uid_count: int = Field(
        default=256, ge=1, description="Size of the uid pool: one uid per concurrent run on this host."
    )
    bwrap: str = Field(default="bwrap", description="bubblewrap executable.")
    mount_proc: bool = Field(
        default=True,
        description="Give each jail its own /proc (the probe turns it off where a container masks /proc).",
    )
    disk_bytes: int = Field(
        default=256 * MiB,
        ge=1 * MiB,
        description="Size of a session's private tmpfs, which holds its work dir and /tmp.",
    )
    inodes: int = Field(
        default=10_000, ge=64, description="Most files and directories in a session's private tmpfs."
    )
    cgroups: bool = Field(
        default=True,
        description="Limit each run's memory and processes with a cgroup where this process may "
        "create one (see distrs/sandbox/cgroups.py).",
    )
    cgroup_root: str | None = Field(
        default=None,
        description="A delegated cgroup v2 directory (memory and pids enabled in its "
        "cgroup.subtree_control) to create run cgroups in; unset: a writable cgroup v1 memory "
        "hierarchy when there is one.",
    )
