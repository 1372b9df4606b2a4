"""Shared pytest configuration: fixture plugins used across test directories, and the one rule
for skips (tests/requirements.py): under ``CI=true`` a skipped test fails unless it is marked
``gpu``, and every run ends with a summary of what was skipped and why."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.requirements import in_ci, skip_is_allowed_in_ci, skip_reason, summarize_skips

pytest_plugins = ["tests.fixtures.redis_server"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    if not (rep.skipped and in_ci() and getattr(rep, "wasxfail", None) is None):
        return rep
    reason = skip_reason(rep.longrepr)
    if not skip_is_allowed_in_ci(item, reason):
        rep.outcome = "failed"
        rep.longrepr = (
            f"CI=true: this test may not skip (only tests marked 'gpu' and components no registry publishes may); "
            f"make test installs what the tiers need. It skipped with: {reason}"
        )
    return rep


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = summarize_skips(terminalreporter.stats.get("skipped", []))
    if not lines:
        return
    terminalreporter.section(
        "skipped, by reason" + (" (only gpu tests may, under CI=true)" if in_ci() else "")
    )
    for line in lines:
        terminalreporter.write_line(line)
