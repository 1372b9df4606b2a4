"""The GPU check's driver against a real ``distrs up`` on this machine (no GPU needed): it starts
the service with one GPU-stage worker serving /readyz, runs the chosen checks and writes the
report, then stops the service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.scripts.test_gpu_check import load_driver

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_driver_runs_checks_through_distrs_up(tmp_path: Path) -> None:
    gc = load_driver()
    report = tmp_path / "r" / "gpu-check.json"
    rc = gc.main(
        [
            "--report",
            str(report),
            "--only",
            "versions",
            "gpu_ready",
            "--budget-s",
            "60",
            "--work",
            str(tmp_path),
        ]
    )
    got = json.loads(report.read_text())
    assert got["format"] == "distrs-gpu-check/1"
    assert [c["name"] for c in got["checks"]] == ["versions", "gpu_ready"]
    ready = got["checks"][1]
    assert ready["ok"] is True, got  # the GPU stage's host answers /readyz on its health port
    assert got["checks"][0]["python"] and got["checks"][0]["distrs_commit"]
    assert rc == (0 if got["ok"] else 1)
    assert (tmp_path / "distrs-up.log").exists()
    assert list(tmp_path.glob("worker-execute-*.log")), "the GPU stage's worker host did not start"
