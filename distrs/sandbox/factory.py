"""Pick the sandbox backend for this host: probe bubblewrap once, fall back loudly.

``auto`` runs a trivial program under the full bwrap jail; if the kernel (or a container's
seccomp profile) forbids the namespaces, it logs a warning and uses the ``rlimits`` backend,
which has no network or filesystem isolation, unless ``require_isolation`` is set, in which
case it raises. ``SandboxError`` from here means the worker must not serve judged stages.
"""

from __future__ import annotations

import logging
import shutil

from distrs.sandbox.base import Limits, Sandbox, SandboxError
from distrs.sandbox.local import BWRAP, RLIMITS, LocalSandbox
from distrs.sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)

FALLBACK_WARNING = (
    "SANDBOX DEGRADED: bubblewrap namespaces are unavailable here ({reason}); untrusted programs "
    "run with rlimits, a scrubbed environment and a private work dir only - they CAN reach the "
    "network and write wherever the sandbox uid may write. Allow user namespaces (see "
    "sandbox/README.md) or set DISTRS_SANDBOX_REQUIRE_ISOLATION=1 to refuse to run."
)


def probe_bwrap(settings: SandboxSettings) -> str | None:
    """None when a jailed ``true`` runs; otherwise why not."""
    if shutil.which(settings.bwrap) is None:
        return f"{settings.bwrap} not installed"
    sb = LocalSandbox(settings, BWRAP)
    try:
        with sb.session() as s:
            r = s.run(["true"], limits=Limits(wall_s=10))
    except (SandboxError, OSError) as e:
        return str(e)
    if not r.ok:
        return f"probe {r.describe()}: {r.stderr[:300].decode(errors='replace')}"
    return None


def create_sandbox(settings: SandboxSettings | None = None) -> Sandbox:
    """The sandbox for this process (call once and share: it is thread-safe)."""
    settings = settings or SandboxSettings()
    backend = settings.backend
    if backend == BWRAP:
        reason = probe_bwrap(settings)
        if reason is not None:
            raise SandboxError(f"bwrap sandbox unusable: {reason}")
        return LocalSandbox(settings, BWRAP)
    if backend == RLIMITS:
        log.warning(FALLBACK_WARNING.format(reason="configured backend=rlimits"))
        return LocalSandbox(settings, RLIMITS)
    if backend != "auto":
        raise SandboxError(f"unknown sandbox backend {backend!r} (expected auto, bwrap or rlimits)")
    reason = probe_bwrap(settings)
    if reason is None:
        return LocalSandbox(settings, BWRAP)
    if settings.mount_proc:
        # Container runtimes mask parts of /proc, which forbids mounting a new procfs inside an
        # unprivileged user namespace; a jail without /proc keeps every other protection.
        no_proc = settings.model_copy(update={"mount_proc": False})
        if probe_bwrap(no_proc) is None:
            log.warning("sandbox: bwrap cannot mount /proc here (%s); jails run without /proc", reason)
            return LocalSandbox(no_proc, BWRAP)
    if settings.require_isolation:
        raise SandboxError(f"bwrap sandbox unusable and isolation is required: {reason}")
    log.warning(FALLBACK_WARNING.format(reason=reason))
    return LocalSandbox(settings, RLIMITS)
