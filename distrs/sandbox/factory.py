"""Pick the sandbox backend for this host: probe the full jail once; never weaken it silently.

``auto`` (the default) runs a trivial program under the full bwrap jail. If that fails (the
pod's seccomp profile refuses namespaces, the kernel forbids user namespaces, bwrap is missing)
the worker gets **no** sandbox: ``create_sandbox`` raises ``SandboxError`` with one line that
says why and names the setting to change, the worker reports itself not ready and runs no
untrusted code. Only ``allow_degraded`` (chart: ``sandbox.allowDegraded: true``) accepts the
``rlimits`` backend, which has no network or filesystem isolation.

``shared()`` is the one sandbox of a worker process; ``readiness()`` is what its ``/readyz``
reports. Both remember the probe's outcome: a failed probe is not retried per request.
"""

from __future__ import annotations

import logging
import shutil
import threading

from distrs.sandbox.base import Limits, Sandbox, SandboxError
from distrs.sandbox.local import BWRAP, RLIMITS, LocalSandbox
from distrs.sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)

UNAVAILABLE = (
    "SANDBOX UNAVAILABLE: {reason}. This worker runs no untrusted code and stays not ready. "
    "Fix: give worker pods the chart's seccomp profile (sandbox.mode=seccompProfile, the "
    "default) or user namespaces (sandbox.mode=userNamespace); see docs/kubernetes.md. To accept "
    "a jail without namespaces instead, set sandbox.allowDegraded=true "
    "(DISTRS_SANDBOX_ALLOW_DEGRADED=1)."
)
DEGRADED = (
    "SANDBOX DEGRADED (allowed by DISTRS_SANDBOX_ALLOW_DEGRADED): {reason}; untrusted programs run "
    "with rlimits, a scrubbed environment and a private work dir only - they CAN reach the "
    "network and read what the sandbox uid may read."
)


def probe_bwrap(settings: SandboxSettings) -> str | None:
    """None when a jailed ``true`` runs; otherwise why not."""
    if shutil.which(settings.bwrap) is None:
        return f"{settings.bwrap} is not installed"
    try:
        sb = LocalSandbox(settings, BWRAP)
        with sb.session() as s:
            r = s.run(["true"], limits=Limits(wall_s=10))
    except (SandboxError, OSError) as e:
        return str(e)
    if not r.ok:
        return f"probe {r.describe()}: {r.stderr[:300].decode(errors='replace').strip()}"
    return None


def create_sandbox(settings: SandboxSettings | None = None) -> Sandbox:
    """The sandbox for this process (call once and share: it is thread-safe)."""
    settings = settings or SandboxSettings()
    backend = settings.backend
    if backend not in (BWRAP, RLIMITS, "auto"):
        raise SandboxError(f"unknown sandbox backend {backend!r} (expected auto, bwrap or rlimits)")
    if backend == RLIMITS:
        if not settings.allow_degraded:
            raise SandboxError(UNAVAILABLE.format(reason="backend=rlimits is configured"))
        log.warning(DEGRADED.format(reason="backend=rlimits is configured"))
        return LocalSandbox(settings, RLIMITS)
    reason = probe_bwrap(settings)
    if reason is None:
        return LocalSandbox(settings, BWRAP)
    if settings.mount_proc:
        # Container runtimes mask parts of /proc, which forbids mounting a new procfs inside an
        # unprivileged user namespace; a jail without /proc keeps every other protection.
        no_proc = settings.model_copy(update={"mount_proc": False})
        if probe_bwrap(no_proc) is None:
            log.info("sandbox: bwrap cannot mount /proc here; jails run without /proc")
            return LocalSandbox(no_proc, BWRAP)
    reason = f"bubblewrap cannot build its jail here ({_one_line(reason)})"
    if backend == BWRAP or not settings.allow_degraded:
        raise SandboxError(UNAVAILABLE.format(reason=reason))
    log.warning(DEGRADED.format(reason=reason))
    return LocalSandbox(settings, RLIMITS)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


_lock = threading.Lock()
_shared: Sandbox | None = None
_failure: str | None = None


def shared() -> Sandbox:
    """This process's sandbox, created on first use; SandboxError (remembered) when unusable."""
    global _shared, _failure
    with _lock:
        if _shared is not None:
            return _shared
        if _failure is not None:
            raise SandboxError(_failure)
        try:
            _shared = create_sandbox()
        except SandboxError as e:
            _failure = str(e)
            log.error("%s", _failure)
            raise
        return _shared


def readiness() -> tuple[bool, str]:
    """(True, "") when this process can run untrusted code, else (False, the one-line reason)."""
    try:
        shared()
    except SandboxError as e:
        return False, str(e)
    return True, ""
