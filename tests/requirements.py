"""What a test needs from the machine, and the one rule for when it is missing: no silent skips in CI.

A test that exercises a real component (a ``redis-server``, the bubblewrap jail, ``prometheus``,
an importable package, a downloaded wheel) asks for it with :func:`need`::

    from tests.requirements import need

    need("redis-server", "the Redis store runs against a real server", found=shutil.which("redis-server"))
    need("torch", "the kernel tests run torch")          # found=None: probed by name (see below)
    helm = need_module("helm_python", "renders the chart")  # returns the imported module

When the component is there, ``need`` returns and the test runs. When it is not:

* outside CI the test is **skipped**, the reason naming the component and why it is needed;
* under ``CI=true`` the test **fails** with ``missing component: NAME (why) [detail]``, so a CI
  machine that lacks a component goes red instead of green having proved nothing.

The same rule covers skips that do not go through ``need`` (``pytest.skip``, ``skipif``,
``importorskip`` anywhere in the tree): the hooks at the end of this module, which the
repository's root ``conftest.py`` installs for every test tree (``tests/`` and
``trainer_client/tests/``), turn every skip under
``CI=true`` into a failure (:func:`skip_is_allowed_in_ci` says which are exempt). The tests
allowed to skip in CI are those marked ``gpu`` (this machine class has no accelerator), because no
install step can provide one, and a component that no package registry publishes, declared with
``need(..., not_installable="why")`` (today only a slime checkout: slime is not on PyPI); such a
skip says so in its reason and stands out in the summary. Every run ends with a summary of what was skipped and why
(:func:`summarize_skips`), so a local run shows what it did not prove.

``make test`` (``scripts/system-deps.sh`` and the ``dev`` extra) installs everything the tiers
need, so a full machine skips only GPU tests.

Why this way: a skip is the right answer on a developer's laptop that lacks a tool, and the wrong
one in CI, where it is how a regression gets through while the run stays green. One function with
one switch (``CI``) keeps the decision in one place and the message uniform; the conftest hook is
the backstop for skips written before it (or by code we do not own).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from collections.abc import Generator
from types import ModuleType
from typing import Any

import pytest

GPU_MARKER = "gpu"
PREFIX = "missing component: "
NOT_INSTALLABLE = "not installable: "


def in_ci() -> bool:
    """True under ``CI=true`` (any case), as CI's ``.ci/run`` runs."""
    return os.environ.get("CI", "").strip().lower() == "true"


def _probe(component: str) -> bool:
    """A component named by itself: an executable on PATH, else an importable top-level module."""
    if shutil.which(component):
        return True
    if component.isidentifier():
        try:
            return importlib.util.find_spec(component) is not None
        except (ImportError, ValueError):
            return False
    return False


def need(component: str, why: str, found: Any = None, detail: str = "", not_installable: str = "") -> None:
    """Require ``component`` for the calling test (or fixture); see the module docstring.

    ``found``: whether it is present, as anything truthy (a path from ``shutil.which``, a probe's
    boolean, ...). ``None`` probes ``component`` by its name: an executable on PATH, else an
    importable module. ``detail``: what the probe said (e.g. why the jail cannot start), appended
    to the message. Returns when present; else skips the test, or fails it under ``CI=true``.
    ``not_installable``: why no install step can provide it; then it skips under ``CI=true`` too.
    """
    present = _probe(component) if found is None else bool(found)
    if present:
        return
    msg = f"{PREFIX}{component} ({why})"
    if detail:
        msg += f": {detail}"
    if not_installable:
        pytest.skip(f"{NOT_INSTALLABLE}{msg} - {not_installable}", allow_module_level=True)
    if in_ci():
        pytest.fail(f"CI=true: {msg}", pytrace=False)
    pytest.skip(msg, allow_module_level=True)  # callable at a module's top level too


def need_module(name: str, why: str) -> ModuleType:
    """``need`` for an importable module, returning it (a ``pytest.importorskip`` that fails in CI)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        need(name, why, found=False, detail=str(e))
    raise AssertionError("unreachable")  # pragma: no cover - need() raised


def skip_is_allowed_in_ci(item: pytest.Item, reason: str) -> bool:
    """Under ``CI=true`` only GPU tests (no install step gives a machine an accelerator) and
    components declared ``not_installable`` may skip."""
    return item.get_closest_marker(GPU_MARKER) is not None or reason.startswith(NOT_INSTALLABLE)


def skip_reason(longrepr: Any) -> str:
    """The reason of a skip report's ``longrepr`` (a (path, line, reason) tuple, or text)."""
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def summarize_skips(reports: list[Any]) -> list[str]:
    """Lines for the end-of-run summary: one per distinct reason, with its count, most first."""
    counts: dict[str, int] = {}
    for rep in reports:
        if getattr(rep, "wasxfail", None) is not None:
            continue
        reason = skip_reason(rep.longrepr)
        counts[reason] = counts.get(reason, 0) + 1
    return [f"{n:4d}  {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


# pytest hooks (installed by the root conftest.py) ------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Under ``CI=true`` a skip of a test that may not skip becomes a failure saying why."""
    rep = yield
    if not (rep.skipped and in_ci() and getattr(rep, "wasxfail", None) is None):
        return rep
    reason = skip_reason(rep.longrepr)
    if not skip_is_allowed_in_ci(item, reason):
        rep.outcome = "failed"
        rep.longrepr = (
            "CI=true: this test may not skip (only tests marked 'gpu' and components no registry "
            f"publishes may); make test installs what the tiers need. It skipped with: {reason}"
        )
    return rep


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """The same for a whole module skipped while it is collected (a module-level importorskip)."""
    rep = yield
    if rep.skipped and in_ci():
        reason = skip_reason(rep.longrepr)
        if collector.get_closest_marker(GPU_MARKER) is None and not reason.startswith(NOT_INSTALLABLE):
            rep.outcome = "failed"
            rep.longrepr = (
                f"CI=true: this module may not skip (only gpu tests may). It skipped with: {reason}"
            )
    return rep


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The end-of-run summary of what was skipped and why."""
    lines = summarize_skips(terminalreporter.stats.get("skipped", []))
    if not lines:
        return
    title = "skipped, by reason" + (" (only gpu tests may, under CI=true)" if in_ci() else "")
    terminalreporter.section(title)
    for line in lines:
        terminalreporter.write_line(line)
