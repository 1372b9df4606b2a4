"""Repository-wide pytest hooks: the no-silent-skips rule of tests/requirements.py (under CI=true
a test that skips for a missing component fails, naming it; only GPU tests skip; every run ends
with the skips by reason) applies to every test tree, tests/ and trainer_client/tests/ alike."""

import pytest

from tests.requirements import pytest_make_collect_report, pytest_runtest_makereport, pytest_terminal_summary

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport", "pytest_terminal_summary"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--kernel-images``: also run the kernel-images pod tier (tests/pods/conftest.py deselects it
    otherwise; `make test-kernel-images`). Declared here, where every run reads it."""
    parser.addoption(
        "--kernel-images",
        action="store_true",
        help="also run the kernel-images tier (marker kernel_images; make test-kernel-images)",
    )
