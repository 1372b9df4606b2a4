"""The GPU check without a GPU: its driver's report (checks that pass, fail, raise or run out of
time; the test tier's JUnit), its statistics, the shell scripts' syntax, and that `make test-gpu`
reaches every test marked gpu."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


def load_driver() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


gc = load_driver()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ctx(clock: Clock, budget: float = 100.0) -> Any:
    return gc.Ctx("http://x", "http://y", clock.t + budget, Path("/tmp"), client=None, clock=clock)  # type: ignore[arg-type]


def test_run_checks_reports_each_outcome_and_keeps_going() -> None:
    clock = Clock()

    def fine(c: Any) -> dict[str, Any]:
        clock.t += 2
        return {"ok": True, "figure": 1.5}

    def bad(c: Any) -> dict[str, Any]:
        return {"ok": False, "why": "wrong verdict"}

    def boom(c: Any) -> dict[str, Any]:
        raise TimeoutError("batch incomplete")

    def silent(c: Any) -> dict[str, Any]:
        return {"figure": 3}  # forgot "ok": not a pass

    def slow(c: Any) -> dict[str, Any]:
        clock.t += 500
        return {"ok": True}

    never = []

    def after(c: Any) -> dict[str, Any]:
        never.append(1)
        return {"ok": True}

    out = gc.run_checks(
        [("fine", fine), ("bad", bad), ("boom", boom), ("silent", silent), ("slow", slow), ("after", after)],
        ctx(clock),
    )
    by = {r["name"]: r for r in out}
    assert by["fine"] == {"name": "fine", "ok": True, "figure": 1.5, "seconds": 2.0}
    assert by["bad"]["ok"] is False and by["bad"]["why"] == "wrong verdict"
    assert by["boom"]["ok"] is False and by["boom"]["error"] == "TimeoutError: batch incomplete"
    assert by["silent"]["ok"] is False
    assert by["after"] == {"name": "after", "ok": False, "skipped": "time budget spent", "seconds": 0.0}
    assert never == []


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.e2e.test_rewards_e2e" name="test_cuda_executes_on_gpu" time="4.2"/>
<testcase classname="tests.integration.sandbox.test_reward_handlers" name="test_cuda_execute_on_gpu" time="0.1">
<failure message="assert 'wrong_answer' == 'ok'">trace</failure></testcase>
<testcase classname="tests.integration.worker.test_gpu_on_device" name="test_probe" time="0">
<skipped message="needs an NVIDIA GPU"/></testcase>
</testsuite></testsuites>"""


def test_report_holds_checks_test_tier_and_install(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text(JUNIT)
    parsed = gc.parse_junit(junit)
    assert (parsed["passed"], parsed["failed"], parsed["skipped"], parsed["error"]) == (1, 1, 1, 0)
    assert parsed["tests"][1]["reason"].startswith("assert 'wrong_answer'")
    assert gc.parse_junit(tmp_path / "absent.xml") is None
    checks = [{"name": "a", "ok": True, "seconds": 1.0}]
    report = gc.build_report(
        checks, {"rc": 1, "junit": parsed}, {"rc": 0, "notes": ["offline"]}, 100.0, 160.5
    )
    assert report["ok"] is False and report["seconds"] == 60.5 and report["format"] == "distrs-gpu-check/1"
    assert report["failed"] == []  # the checks passed; the test tier did not
    path = tmp_path / "out" / "gpu-check.json"
    gc.write_report(path, report)
    assert json.loads(path.read_text()) == json.loads(json.dumps(report))
    # a tier whose GPU tests all skipped (no GPU after all) is not a pass
    skipped_only = {"passed": 0, "failed": 0, "error": 0, "skipped": 3, "tests": []}
    assert gc.build_report(checks, {"rc": 0, "junit": skipped_only}, None, 0, 1)["ok"] is False
    assert (
        gc.build_report(checks, {"rc": 0, "junit": {**skipped_only, "passed": 2}}, None, 0, 1)["ok"] is True
    )
    assert gc.build_report([*checks, {"name": "b", "ok": False}], None, None, 0, 1)["failed"] == ["b"]


def test_report_path_defaults_to_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gc.default_report_path() == tmp_path / "gpu-check.json"
    monkeypatch.delenv("OUT")
    assert gc.default_report_path() == Path("gpu-check.json")


def test_cv_and_problem_rows() -> None:
    assert gc.cv([1.0]) is None and gc.cv([0.0, 0.0]) is None
    assert gc.cv([1.0, 1.0, 1.0]) == 0.0
    assert gc.cv([0.9, 1.1]) == pytest.approx(0.1414, rel=1e-3)
    res = {
        "request_id": "b-0",
        "status": "ok",
        "score": 0.9,
        "detail": {"run_time_s": 0.25, "reference_time_s": 1.0, "speedup": 4.0, "flags": []},
        "stages": [{"name": "compile", "run_s": 2.0, "outcome": "next", "worker": "w"}],
    }
    row = gc.problem_row("add", res, "ok")
    assert row["runtime_s"] == 0.25 and row["speedup"] == 4.0 and "error" not in row
    assert row["stages"] == [{"name": "compile", "run_s": 2.0, "outcome": "next"}]
    bad = gc.problem_row("add", {**res, "status": "internal_error", "detail": {"error": "GPU fault"}}, "ok")
    assert bad["error"] == "GPU fault"


def test_metrics_text_is_parsed() -> None:
    text = (
        "# TYPE distrs_gpu_healthy gauge\ndistrs_gpu_healthy 1.0\n"
        "# TYPE distrs_gpu_health_checks_total counter\n"
        'distrs_gpu_health_checks_total{trigger="cuda_error",result="healthy"} 2.0\n'
    )
    m = gc.scrape(text)
    assert m["distrs_gpu_healthy"] == [({}, 1.0)]
    assert m["distrs_gpu_health_checks_total"] == [({"trigger": "cuda_error", "result": "healthy"}, 2.0)]


def test_every_check_is_named_once_and_callable() -> None:
    names = [n for n, _ in gc.CHECKS]
    assert len(names) == len(set(names)) and all(callable(c) for _, c in gc.CHECKS)
    assert {"health_probe", "cuda_programs", "timing_noise", "cuda_error_recovery", "gpu_metrics"} <= set(
        names
    )


@pytest.mark.parametrize("script", ["gpu-check.sh", "gpu-check-prepare.sh"])
def test_shell_scripts_parse(script: str) -> None:
    p = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_make_test_gpu_reaches_every_gpu_test() -> None:
    """Every file with a test marked gpu lies under GPU_TESTS (and outside its --ignore folders)."""
    make = (ROOT / "Makefile").read_text()
    (line,) = [ln for ln in make.splitlines() if ln.startswith("GPU_TESTS ?=")]
    words = line.split("?=", 1)[1].split()
    roots = [w for w in words if not w.startswith("--")]
    ignored = [w.split("=", 1)[1] for w in words if w.startswith("--ignore=")]
    marked = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"pytest\.mark\.gpu\b", p.read_text())
    ]
    assert marked, "no test is marked gpu"
    for f in marked:
        assert any(f.startswith(r + "/") for r in roots), f"{f} is outside make test-gpu's {roots}"
        assert not any(f.startswith(i + "/") for i in ignored), f"{f} is in an ignored folder"
