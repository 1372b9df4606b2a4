"""Where the CUDA compiler is: resolved once on the worker, run by absolute path in the jail.

A standard CUDA install puts ``nvcc`` in ``CUDA_HOME/bin`` only (``/usr/local/cuda/bin`` by
default), which is on a login shell's PATH but not on the jail's (``/usr/local/bin:/usr/bin:
/bin``), so a bare ``nvcc`` ran nowhere. The compiler is resolved on the host, in this order:
the setting itself where it is an absolute path; else the named program in the ``bin`` of the
configured toolkit, of ``$CUDA_HOME`` (or ``$CUDA_PATH``), and of ``/usr/local/cuda``; else the
worker's own PATH. The jail then runs that absolute path, with the toolkit's root bound
read-only where it lies outside the jail's ``/usr``; readiness names what is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOME = "/usr/local/cuda"
HINT = "set DISTRS_JUDGE_NVCC to its absolute path, or CUDA_HOME to the toolkit"


@dataclass(frozen=True)
class Toolkit:
    nvcc: str  # absolute path, as the host and the jail see it
    root: str  # the toolkit's real directory (two levels above the real nvcc)


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def homes(configured: str = "", env: Mapping[str, str] | None = None) -> list[str]:
    """Toolkit directories to look in, in order, without repeats."""
    env = os.environ if env is None else env
    found: list[str] = []
    for h in (configured, env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), DEFAULT_HOME):
        if h and h not in found:
            found.append(h)
    return found


def resolve(setting: str, configured_home: str = "", env: Mapping[str, str] | None = None) -> Toolkit | None:
    """The compiler ``setting`` names (see the module docstring); None where there is none."""
    env = os.environ if env is None else env
    if os.path.isabs(setting):
        path: str | None = setting if _executable(setting) else None
    else:
        path = next(
            (p for h in homes(configured_home, env) if _executable(p := os.path.join(h, "bin", setting))),
            None,
        ) or shutil.which(setting, path=env.get("PATH", os.defpath))
    if path is None:
        return None
    path = os.path.abspath(path)
    return Toolkit(nvcc=path, root=os.path.dirname(os.path.dirname(os.path.realpath(path))))


def missing(setting: str, configured_home: str = "", env: Mapping[str, str] | None = None) -> str:
    """Readiness's reason where :func:`resolve` finds nothing."""
    where = ", ".join(f"{h}/bin" for h in homes(configured_home, env))
    return f"no CUDA compiler: {setting!r} is not in {where} nor on the worker's PATH ({HINT})"


def jail_ro_paths(tk: Toolkit) -> tuple[str, ...]:
    """What the jail must bind to run ``tk.nvcc``: nothing under ``/usr`` (bound already)."""
    paths = {tk.root, os.path.dirname(tk.nvcc)}
    return tuple(sorted(p for p in paths if not (p == "/usr" or p.startswith("/usr/"))))
