"""Real sandboxes for the integration tests: bwrap when this host allows it, else skipped."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrs.sandbox import SandboxSettings
from distrs.sandbox.factory import probe_bwrap
from distrs.sandbox.local import BWRAP, LocalSandbox
from tests.requirements import need

UID_BASE = 63000  # a range no other test uses, so leftover checks by uid are exact
UID_COUNT = 16


def sandbox_settings(tmp: Path) -> SandboxSettings:
    return SandboxSettings(workdir_base=str(tmp / "sbx"), uid_base=UID_BASE, uid_count=UID_COUNT)


@pytest.fixture
def bwrap_sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    settings = sandbox_settings(tmp_path)
    reason = probe_bwrap(settings)
    need(
        "bubblewrap jail",
        "real sandboxes run untrusted programs in it",
        found=reason is None,
        detail=reason or "",
    )
    yield LocalSandbox(settings, BWRAP)


@pytest.fixture
def noproc_sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    """The jail of the default, non-root worker pod: the container masks its /proc, so the probe
    turns ``mount_proc`` off (distrs.sandbox.factory) and jails have no /proc. Emulated here by
    turning it off ourselves."""
    settings = sandbox_settings(tmp_path).model_copy(update={"mount_proc": False})
    reason = probe_bwrap(settings)
    need(
        "bubblewrap jail",
        "real sandboxes run untrusted programs in it",
        found=reason is None,
        detail=reason or "",
    )
    yield LocalSandbox(settings, BWRAP)


def sandbox_processes(marker: str | None = None) -> list[tuple[int, str]]:
    """Live processes of the sandbox uid range (as root) or whose command line has ``marker``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            uid = d.stat().st_uid
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(
                (ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")), ""
            )
        except OSError:
            continue
        if "Z" in state.split(":", 1)[-1][:3]:
            continue  # a zombie is already dead
        by_uid = os.geteuid() == 0 and UID_BASE <= uid < UID_BASE + UID_COUNT
        if by_uid or (marker is not None and marker in cmd):
            found.append((int(d.name), cmd))
    return found


def assert_no_survivors(marker: str | None = None, within_s: float = 3.0) -> None:
    """No process of the run is left (the kernel tears a PID namespace down asynchronously)."""
    deadline = time.monotonic() + within_s
    while True:
        left = sandbox_processes(marker)
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes survived the sandbox: {left}")
        time.sleep(0.05)
