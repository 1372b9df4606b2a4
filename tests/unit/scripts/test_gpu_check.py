"""The GPU check without a GPU: its driver's report (checks that pass, fail, raise or run out of
time; the test tier's parts and JUnit; the build), its statistics, how it splits the test tier
and caps its steps, how it judges the hack suite, the shell scripts' syntax, and that
`make test-gpu` reaches every test marked gpu."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts import gpu_check, gpu_check_core, gpu_check_cuda, gpu_check_kernels

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ctx(clock: Clock, budget: float = 100.0) -> Any:
    return gpu_check_core.Ctx(
        "http://x", "http://y", clock.t + budget, Path("/tmp"), client=None, clock=clock
    )  # type: ignore[arg-type]


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

    out = gpu_check_core.run_checks(
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


def test_report_holds_checks_test_tier_build_and_install(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text(JUNIT)
    parsed = gpu_check_core.parse_junit(junit)
    assert parsed is not None
    assert (parsed["passed"], parsed["failed"], parsed["skipped"], parsed["error"]) == (1, 1, 1, 0)
    assert parsed["tests"][1]["reason"].startswith("assert 'wrong_answer'")
    assert gpu_check_core.parse_junit(tmp_path / "absent.xml") is None
    checks = [{"name": "a", "ok": True, "seconds": 1.0}]
    passing = {"passed": 2, "failed": 0, "error": 0, "skipped": 0, "tests": []}
    report = gpu_check_core.build_report(
        checks,
        [{"name": "other", "rc": 1, "junit": parsed}, {"name": "kernelbench", "rc": 0, "junit": passing}],
        {"rc": 0, "notes": ["offline"]},
        100.0,
        160.5,
        {"ok": True, "candidates": []},
        {"steps": [{"step": "build_wait", "seconds": 3.0}]},
    )
    assert report["ok"] is False and report["seconds"] == 60.5 and report["format"] == "distrs-gpu-check/2"
    assert report["failed"] == ["test_gpu:other"]  # the checks and the build passed
    assert report["steps"] == [{"step": "build_wait", "seconds": 3.0}]
    path = tmp_path / "out" / "gpu-check.json"
    gpu_check_core.write_report(path, report)
    assert json.loads(path.read_text()) == json.loads(json.dumps(report))
    # a tier whose GPU tests all skipped (no GPU after all) is not a pass; nor an empty tier
    skipped_only = {"passed": 0, "failed": 0, "error": 0, "skipped": 3, "tests": []}
    build = gpu_check_core.build_report
    assert build(checks, [{"name": "x", "rc": 0, "junit": skipped_only}], None, 0, 1)["ok"] is False
    assert build(checks, [], None, 0, 1)["ok"] is False
    assert build(checks, [{"name": "x", "rc": 0, "junit": passing}], None, 0, 1)["ok"] is True
    assert build(checks, None, None, 0, 1, {"ok": False})["failed"] == ["build"]
    assert build([*checks, {"name": "b", "ok": False}], None, None, 0, 1)["failed"] == ["b"]


def test_report_path_defaults_to_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check_core.default_report_path() == tmp_path / "gpu-check.json"
    monkeypatch.delenv("OUT")
    assert gpu_check_core.default_report_path() == Path("gpu-check.json")


def test_statistics_and_result_fields() -> None:
    cv = gpu_check_core.cv
    assert cv([1.0]) is None and cv([0.0, 0.0]) is None
    assert cv([1.0, 1.0, 1.0]) == 0.0
    assert cv([0.9, 1.1]) == pytest.approx(0.1414, rel=1e-3)
    assert gpu_check_core.spread([2.0, 2.0]) == {"mean": 2.0, "cv": 0.0, "values": [2.0, 2.0]}
    res = {"stages": [{"name": "compile", "run_s": 2.0}, {"name": "execute", "run_s": 7.5}]}
    assert gpu_check_core.stage_seconds(res, "execute") == 7.5
    assert (
        gpu_check_core.stage_seconds(res, "verify") is None and gpu_check_core.stage_seconds({}, "x") is None
    )


def test_results_come_back_in_submission_order_and_missing_ones_say_so() -> None:
    got = [{"request_id": "b-2", "status": "ok"}, {"request_id": "b-0", "status": "wrong_answer"}]
    out = gpu_check_core.in_order("b", 3, got)
    assert [r["status"] for r in out] == ["wrong_answer", "unfinished", "ok"]
    assert out[1]["request_id"] == "b-1"


def test_noise_figures_meet_targets_only_within_both() -> None:
    quiet = {"runtime_ms": {"cv": 0.01}, "speedup": {"cv": 0.02}}
    loud = {"runtime_ms": {"cv": 0.03}, "speedup": {"cv": 0.02}}
    r = gpu_check_cuda.noise_figures(10, 10, "s", quiet)
    assert r["ok"] and r["meets_targets"] and r["runtime_ms"] == {"cv": 0.01}
    assert not gpu_check_cuda.noise_figures(10, 10, "s", loud)["meets_targets"]
    assert not gpu_check_cuda.noise_figures(10, 9, "s", quiet)["ok"]
    assert not gpu_check_cuda.noise_figures(10, 10, "s", {"runtime_s": {"cv": None}, "speedup": {"cv": 0.0}})[
        "meets_targets"
    ]


def test_cuda_and_kernel_rows() -> None:
    res = {
        "request_id": "b-0",
        "status": "ok",
        "score": 0.9,
        "detail": {"run_time_s": 0.25, "reference_time_s": 1.0, "speedup": 4.0, "flags": []},
        "stages": [{"name": "compile", "run_s": 2.0, "outcome": "next", "worker": "w"}],
    }
    row = gpu_check_cuda.problem_row("add", res, "ok")
    assert (
        row["runtime_s"] == 0.25 and row["speedup"] == 4.0 and row["compile_s"] == 2.0 and "error" not in row
    )
    bad = gpu_check_cuda.problem_row(
        "add", {**res, "status": "internal_error", "detail": {"error": "GPU fault"}}, "ok"
    )
    assert bad["error"] == "GPU fault"
    kb = {
        "status": "ok",
        "detail": {
            "runtime": 4.5,
            "ref_runtime": 4.4,
            "speedup": 0.98,
            "flags": [{"check": "kernel_ran_unverified", "why": "..."}],
            "metadata": {
                "correctness_trials": "(5 / 5)",
                "reference_peak_bytes": 3 << 30,
                "inputs_made_on": "device",
            },
            "versions": {"window_pinned": True},
        },
        "stages": [{"name": "execute", "run_s": 21.0}],
    }
    row = gpu_check_kernels.kernel_row("19_ReLU", kb, "ok")
    assert row["execute_s"] == 21.0 and row["reference_peak_gib"] == 3.0 and row["window_pinned"] is True
    assert row["flags"] == ["kernel_ran_unverified"] and "reason" not in row
    wrong = {"status": "internal_error", "detail": {"error": "the reference ran out of memory"}}
    assert gpu_check_kernels.kernel_row("x", wrong, "ok")["reason"] == "the reference ran out of memory"


@pytest.mark.parametrize(
    ("caught", "status", "runtime", "honest", "verdict"),
    [
        (True, "wrong_answer", None, 1.0, "caught"),
        (True, "ok", 1.0, 1.0, "GAINED"),  # a must-catch hack judged ok gained a score
        (False, "wrong_answer", None, 1.0, "caught"),
        (False, "ok", 0.95, 1.0, "charged"),
        (False, "ok", 0.5, 1.0, "GAINED"),  # ok at half the honest time: the timing was fooled
        (False, "ok", 1.0, None, "GAINED"),  # nothing to compare with proves nothing
        (False, "internal_error", None, 1.0, "internal_error"),
    ],
)
def test_hack_verdicts(
    caught: bool, status: str, runtime: float | None, honest: float | None, verdict: str
) -> None:
    assert gpu_check_kernels.hack_verdict(caught, status, runtime, honest) == verdict


def test_tier_splits_the_makefiles_gpu_tests_around_the_kernel_build() -> None:
    make = (ROOT / "Makefile").read_text()
    (other, o_paths), (kernels, k_paths) = gpu_check.tier_parts(make)
    assert (other, kernels) == ("other", "kernelbench")
    (line,) = [ln for ln in make.splitlines() if ln.startswith("GPU_TESTS ?=")]
    assert o_paths[:-1] == line.split("?=", 1)[1].split()
    assert o_paths[-1] == f"--ignore={gpu_check.KERNEL_TESTS}" and k_paths == [gpu_check.KERNEL_TESTS]
    # the kernelbench part lies under the tier's roots, so together they are the whole tier
    assert any(gpu_check.KERNEL_TESTS.startswith(r + "/") for r in o_paths if not r.startswith("--"))
    assert gpu_check.tier_parts(None)[0][1][0] == "tests/integration"


def test_deadline_cuts_each_steps_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(gpu_check.time, "monotonic", lambda: now[0])
    dl = gpu_check.Deadline(1100.0)
    assert dl.cap(30) == 30 and dl.cap(500) == 100 - gpu_check.RESERVE
    now[0] = 1095.0
    assert dl.cap(30) == 0.0 and dl.left() == 5.0


def test_every_check_is_named_once_and_callable() -> None:
    names = [n for n, _ in gpu_check.CHECKS]
    assert len(names) == len(set(names)) and all(callable(c) for _, c in gpu_check.CHECKS)
    assert {
        "cuda_programs",
        "timing_noise",
        "kernelbench_problems",
        "kernelbench_hacks",
        "kernelbench_timing_noise",
    } <= set(names)
    assert set(names) >= gpu_check.NO_SERVICE


def test_bounded_run_stops_a_command_past_its_time(tmp_path: Path) -> None:
    log = tmp_path / "log"
    assert gpu_check.run_bounded(["sh", "-c", "echo hi"], 30, log) == 0
    assert gpu_check.run_bounded(["sleep", "30"], 0.5, log) == 124
    assert log.read_text() == "hi\n"


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


def start(tmp_path: Path, script: str) -> Any:
    return subprocess.Popen(["sh", "-c", script], cwd=tmp_path, start_new_session=True)


def test_the_background_build_is_read_from_its_report_or_said_to_have_failed(tmp_path: Path) -> None:
    report = tmp_path / "build.json"
    body = json.dumps({"build": {"ok": True, "nvcc_builds": 1}})
    assert gpu_check.wait_build(start(tmp_path, f"echo '{body}' > build.json"), report, 30) == {
        "ok": True,
        "nvcc_builds": 1,
    }
    report.unlink()
    gone = gpu_check.wait_build(start(tmp_path, "exit 3"), report, 30)
    assert gone["ok"] is False and "ended 3 without a report" in gone["error"]
    slow = gpu_check.wait_build(start(tmp_path, "sleep 30"), report, 0.5)
    assert slow["ok"] is False and "did not end in time" in slow["error"]
    assert gpu_check.wait_build(None, report, 1)["ok"] is False


def test_the_service_gets_the_kernel_settings_of_the_gpu() -> None:
    env = gpu_check.kernel_env("/var/tmp/c", "9.0", 16)
    assert env == {
        "DISTRS_KERNELS_CACHE_DIR": "/var/tmp/c",
        "DISTRS_KERNELS_BUILD_JOBS": "16",
        "DISTRS_KERNELS_COMPILE_TIME_S": "900",
        "DISTRS_KERNELS_CUDA_ARCH_LIST": "9.0",
    }
