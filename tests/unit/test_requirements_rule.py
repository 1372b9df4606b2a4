"""The no-silent-skips rule (tests/requirements.py, tests/conftest.py), run in a child pytest so
that CI=true can be set and unset: a missing component skips outside CI and fails under it,
naming the component; only ``gpu`` tests skip under CI; the run ends with the skip summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import pytest
from tests.requirements import need, need_module


def test_needs_a_missing_tool():
    need("no-such-tool-xyz", "the probe test needs it")


def test_needs_a_missing_module():
    need_module("no_such_module_xyz", "the probe test imports it")


def test_plain_skip():
    pytest.skip("written before the rule")


@getattr(pytest.mark, "gpu")  # spelled so: the gpu tier's file scan is for real GPU tests
def test_gpu_skip():
    pytest.skip("needs an NVIDIA GPU")


def test_not_installable():
    need("a checkout", "runs its code", found=False, not_installable="no registry publishes it")


def test_present():
    need("sh", "every host has it")
    need("flag", "given found", found=True)
"""


MODULE_LEVEL = """
from tests.requirements import need_module

mod = need_module("no_such_module_xyz", "the whole module needs it")


def test_never_runs():
    assert mod
"""


def run(ci: str | None, text: str = PROBE) -> subprocess.CompletedProcess[str]:
    probe = REPO / "tests" / "unit" / f"_probe_requirements_{os.getpid()}_{ci}.py"
    probe.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    try:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(probe)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        probe.unlink()


def test_outside_ci_missing_components_skip_and_are_summarised() -> None:
    r = run(None)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "1 passed, 5 skipped" in r.stdout
    assert "skipped, by reason" in r.stdout
    assert "missing component: no-such-tool-xyz (the probe test needs it)" in r.stdout
    assert "missing component: no_such_module_xyz (the probe test imports it)" in r.stdout


def test_under_ci_a_missing_component_fails_naming_it_and_only_gpu_skips() -> None:
    r = run("true")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "3 failed, 1 passed, 2 skipped" in r.stdout
    assert "CI=true: missing component: no-such-tool-xyz (the probe test needs it)" in r.stdout
    assert "CI=true: missing component: no_such_module_xyz" in r.stdout
    assert "this test may not skip" in r.stdout and "written before the rule" in r.stdout
    assert "needs an NVIDIA GPU" in r.stdout  # the gpu test skips, summarised
    assert (
        "not installable: missing component: a checkout (runs its code) - no registry publishes it"
        in r.stdout
    )


def test_a_module_level_need_skips_the_module_outside_ci_and_fails_it_under_ci() -> None:
    r = run(None, MODULE_LEVEL)
    assert r.returncode in (0, 5) and "1 skipped" in r.stdout, r.stdout[-2000:]  # 5: no test ran
    r = run("true", MODULE_LEVEL)
    assert r.returncode != 0 and "CI=true: missing component: no_such_module_xyz" in r.stdout, r.stdout[
        -2000:
    ]


def test_a_plain_module_level_importorskip_fails_under_ci() -> None:
    text = 'import pytest\n\nmod = pytest.importorskip("no_such_module_xyz")\n\n\ndef test_x():\n    assert mod\n'
    r = run(None, text)
    assert r.returncode in (0, 5) and "1 skipped" in r.stdout, r.stdout[-2000:]
    r = run("true", text)
    assert r.returncode != 0 and "CI=true: this module may not skip" in r.stdout, r.stdout[-2000:]
