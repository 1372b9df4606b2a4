"""CUDA scoring formula, GPU discovery and the no-GPU readiness of the execute stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput
from distrs.rewards.cuda import ExecuteHandler, cuda_score, gpu_devices, gpu_mounts, speed_of
from distrs.rewards.judge.cases import CaseResult, Verdict
from distrs.rewards.judge.payload import Case, JudgedPayload


@pytest.mark.parametrize(
    ("c", "speedup", "cap", "score"),
    [
        (1.0, None, 2.0, 1.0),
        (0.5, None, 2.0, 0.5),
        (1.0, 0.0, 2.0, 0.5),
        (1.0, 1.0, 2.0, 0.75),
        (1.0, 2.0, 2.0, 1.0),
        (1.0, 50.0, 2.0, 1.0),
        (0.5, 2.0, 2.0, 0.5),
        (0.0, 10.0, 2.0, 0.0),
        (1.0, 1.0, 4.0, 0.625),
    ],
)
def test_cuda_score(c: float, speedup: float | None, cap: float, score: float) -> None:
    assert cuda_score(c, speedup, cap) == pytest.approx(score)


def test_correct_never_loses_to_incorrect_at_same_speed() -> None:
    for s in (0.1, 1.0, 3.0):
        assert cuda_score(1.0, s, 2.0) > cuda_score(0.9, s, 2.0)


def test_speed_is_median_of_passed_cases() -> None:
    p = JudgedPayload(code="x", tests=(Case("", ""),) * 3, reference_time_s=1.0)
    v = Verdict(
        Status.WRONG_ANSWER,
        2,
        3,
        [CaseResult(Status.OK, 0.2), CaseResult(Status.WRONG_ANSWER, 9.0), CaseResult(Status.OK, 0.4)],
    )
    t, speedup = speed_of(v, p)
    assert t == pytest.approx(0.3) and speedup == pytest.approx(1 / 0.3)
    none = Verdict(Status.TIMEOUT, 0, 1, [CaseResult(Status.TIMEOUT, 5.0)])
    assert speed_of(none, p) == (None, None)


def _dev(tmp_path: Path, names: list[str]) -> str:
    for n in names:
        (tmp_path / n).touch()
    return str(tmp_path)


def test_gpu_devices_and_mounts(tmp_path: Path) -> None:
    dev = _dev(tmp_path, ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"])
    assert gpu_devices(dev) == [f"{dev}/nvidia0", f"{dev}/nvidia1"]
    m = gpu_mounts(dev)
    assert f"{dev}/nvidiactl" in m.dev_paths and f"{dev}/nvidia-uvm" in m.dev_paths
    assert f"{dev}/null" not in m.dev_paths and m.sys


def test_execute_not_ready_without_gpu_and_never_blames_the_model(tmp_path: Path) -> None:
    h = ExecuteHandler(dev=_dev(tmp_path, ["null"]))
    ok, why = h.ready()
    assert not ok and "no NVIDIA GPU" in why
    out = h.run(StageInput("r", "t", "cuda", "execute", {"code": "x", "tests": []}, {"binary": "AA=="}))
    assert out.status is Status.INTERNAL_ERROR


def test_execute_needs_exactly_one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = ExecuteHandler(dev=_dev(tmp_path, ["nvidia0", "nvidia1"]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert not h.ready()[0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert h.ready() == (True, "")
    (tmp_path / "one").mkdir()
    one = ExecuteHandler(dev=_dev(tmp_path / "one", ["nvidia3"]))
    assert one.ready() == (True, "")
