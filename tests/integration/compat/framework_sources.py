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

import dataclasses
import importlib.util
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

from tests.requirements import need

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
            need(
                f"wheel {dist}=={version}",
                f"the test runs {dist}'s own client code; make test-wheels caches it in {d}",
                found=False,
                detail=r.stderr.strip()[-300:],
            )
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


SLIME_SOURCE_ENV = "DISTRS_SLIME_SOURCE"


@dataclasses.dataclass
class SlimeSample:
    """Stand-in for ``slime.utils.types.Sample`` (which imports torch): the fields ``rm_hub`` reads."""

    prompt: str | list[dict[str, str]] = ""
    response: str = ""
    label: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    custom_rm_path: str | None = None


def slime_rm_hub() -> types.ModuleType:
    """slime's ``slime/rollout/rm_hub/__init__.py`` (``remote_rm``, ``async_rm``,
    ``batched_async_rm``) from the slime checkout that ``DISTRS_SLIME_SOURCE`` names.

    slime is not published on PyPI, so there is no wheel to fetch: without a checkout the test is
    skipped (the reproduction in ``framework_clients.py`` covers the protocol then). Stubs stand
    in for what the remote path does not use: ``slime.utils.types`` (its ``Sample`` imports
    torch), ``slime.utils.misc.load_function`` (custom reward functions) and the rule-based graders
    the module imports beside it (``deepscaler``, ``f1``, ``gpqa``, ``math_dapo_utils``,
    ``math_utils``: sympy and pylatexenc).
    """
    root = os.environ.get(SLIME_SOURCE_ENV)
    path = Path(root or ".") / "slime" / "rollout" / "rm_hub" / "__init__.py"
    if not root or not path.is_file():
        need(
            "slime checkout",
            f"the test runs slime's own rm_hub; set {SLIME_SOURCE_ENV} to a checkout",
            found=False,
            not_installable="slime is not on PyPI (framework_clients.py's reproduction covers its protocol)",
        )
    name = "slime.rollout.rm_hub"
    if name in sys.modules:
        return sys.modules[name]
    for pkg in ("slime", "slime.utils", "slime.rollout"):
        m = types.ModuleType(pkg)
        m.__path__ = []
        sys.modules.setdefault(pkg, m)

    def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rule-based grader of slime is not what this test runs")

    stubs = {
        "slime.utils.types": {"Sample": SlimeSample},
        "slime.utils.misc": {"load_function": unused},
        f"{name}.deepscaler": {"get_deepscaler_rule_based_reward": unused},
        f"{name}.f1": {"f1_score": unused},
        f"{name}.gpqa": {"compute_gpqa_reward": unused},
        f"{name}.math_dapo_utils": {"compute_score": unused},
        f"{name}.math_utils": {"extract_answer": unused, "grade_answer_verl": unused},
    }
    for mod_name, attrs in stubs.items():
        mod = types.ModuleType(mod_name)
        mod.__dict__.update(attrs)
        sys.modules.setdefault(mod_name, mod)
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
