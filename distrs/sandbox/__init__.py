"""Running untrusted programs: limits, namespaces, timeouts, output caps (see docs/sandbox.md)."""

from distrs.sandbox.base import (
    Limits,
    MemoryKind,
    Mounts,
    RunResult,
    Sandbox,
    SandboxError,
    Session,
    Termination,
    merge_mounts,
)
from distrs.sandbox.factory import create_sandbox, readiness, shared
from distrs.sandbox.settings import SandboxSettings

__all__ = [
    "Limits",
    "MemoryKind",
    "Mounts",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxSettings",
    "Session",
    "Termination",
    "create_sandbox",
    "merge_mounts",
    "readiness",
    "shared",
]
