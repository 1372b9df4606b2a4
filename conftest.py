"""Repository-wide pytest hooks: the no-silent-skips rule of tests/requirements.py (under CI=true
a test that skips for a missing component fails, naming it; only GPU tests skip; every run ends
with the skips by reason) applies to every test tree, tests/ and trainer_client/tests/ alike."""

from tests.requirements import pytest_make_collect_report, pytest_runtest_makereport, pytest_terminal_summary

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport", "pytest_terminal_summary"]
