"""Sandbox settings, read from ``DISTRS_SANDBOX_*`` environment variables."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SandboxSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTRS_SANDBOX_", extra="ignore")

    backend: str = Field(
        default="auto",
        description="bwrap | rlimits | auto (bwrap when the kernel allows namespaces, else rlimits).",
    )
    require_isolation: bool = Field(
        default=False,
        description="Refuse to start (instead of warning) when only the rlimits fallback works.",
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
