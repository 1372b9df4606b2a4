"""The trainers' own client code, loaded from their published wheels (never vendored).

verl, OpenRLHF and TRL pull in a GPU training stack when installed, but the code that talks to a
reward service is a single module with light imports. :func:`load_module` downloads the wheel once
(``pip download --no-deps`` into ``DISTRS_TEST_WHEELS``, default ``~/.cache/distrs-test-wheels``),
extracts that one file, and imports it under its own name with empty parent packages, so
importing it does not run the framework's heavy ``__init__``. ``stubs`` supplies the few modules
it imports that are not worth the whole framework (e.g. a logger helper). When the wheel cannot be
had (no network), the test is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest

VERL = ("verl", "0.9.1")
OPENRLHF = ("openrlhf", "0.11.2")
TRL = ("trl", "1.16.0")


def wheel_dir() -> Path:
    d = Path(os.environ.get("DISTRS_TEST_WHEELS") or Path.home() / ".cache" / "distrs-test-wheels")
    d.mkdir(parents=True, exist_ok=True)
    return d


def wheel(dist: str, version: str) -> Path:
    """The framework's wheel, downloaded on first use; skips the test when it cannot be had."""
    d = wheel_dir()
    found = sorted(d.glob(f"{dist}-{version}-*.whl"))
    if not found:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                f"{dist}=={version}",
                "-d",
                str(d),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        found = sorted(d.glob(f"{dist}-{version}-*.whl"))
        if not found:
            pytest.skip(f"cannot download {dist}=={version}: {r.stderr.strip()[-300:]}")
    return found[0]


def source(dist: str, version: str, path: str) -> Path:
    """One file of the wheel (``path`` as in the installed package), extracted next to it."""
    whl = wheel(dist, version)
    out = wheel_dir() / f"{dist}-{version}" / path
    if not out.exists():
        with zipfile.ZipFile(whl) as z:
            names = [n for n in z.namelist() if n == path or n.endswith("/purelib/" + path)]
            if not names:
                raise FileNotFoundError(f"{path} not in {whl.name}")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(names[0]))
    return out


def load_module(
    dist: str, version: str, path: str, stubs: dict[str, types.ModuleType] | None = None
) -> types.ModuleType:
    """Import the wheel's ``path`` (e.g. ``openrlhf/utils/agent.py``) as its dotted module name."""
    name = path.removesuffix(".py").replace("/", ".")
    if name in sys.modules:
        return sys.modules[name]
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = []
            sys.modules[pkg] = m
    for stub_name, stub in (stubs or {}).items():
        sys.modules.setdefault(stub_name, stub)
    spec = importlib.util.spec_from_file_location(name, source(dist, version, path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def openrlhf_agent() -> types.ModuleType:
    """``openrlhf.utils.agent`` (its HTTP reward client) with its own logging helper."""
    load_module(*OPENRLHF, "openrlhf/utils/logging_utils.py")
    return load_module(*OPENRLHF, "openrlhf/utils/agent.py")


def verl_sandbox_utils() -> types.ModuleType:
    """``verl.utils.reward_score.sandbox_fusion.utils`` (requests only)."""
    return load_module(*VERL, "verl/utils/reward_score/sandbox_fusion/utils.py")
