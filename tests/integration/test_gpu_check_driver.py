"""The GPU check's driver against a real ``distrs up`` on this machine (no GPU needed): it starts
the service with one GPU-stage worker serving /readyz, runs the chosen checks and writes the
report, then stops the service. (Without the GPU test tier, and with no check that needs the
kernel build, it starts no build.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import gpu_check

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_driver_runs_checks_through_distrs_up(tmp_path: Path) -> None:
    report = tmp_path / "r" / "gpu-check.json"
    rc = gpu_check.main(
        [
            "--report",
            str(report),
            "--only",
            "versions",
            "gpu_ready",
            "--skip-tier",
            "--budget-s",
            "60",
            "--work",
            str(tmp_path),
        ]
    )
    got = json.loads(report.read_text())
    assert got["format"] == "distrs-gpu-check/2"
    assert [c["name"] for c in got["checks"]] == ["versions", "gpu_ready"]
    ready = got["checks"][1]
    assert ready["ok"] is True, got  # the GPU stage's host answers /readyz on its health port
    assert got["checks"][0]["python"] and got["checks"][0]["distrs_commit"]
    assert rc == (0 if got["ok"] else 1)
    assert (tmp_path / "distrs-up.log").exists() and not (tmp_path / "build.log").exists()
    assert [s["step"] for s in got["steps"]] == ["service_start", "checks_early", "checks_late"]
    assert list(tmp_path.glob("worker-execute-*.log")), "the GPU stage's worker host did not start"
