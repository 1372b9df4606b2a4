"""GPU sharing and the timing flags results carry: whole GPU, MIG slice, time-sliced; and the
``cuda`` execute handler puts them in its result (fake device nodes, a fake sandbox)."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput
from distrs.rewards.cuda import ExecuteHandler
from distrs.rewards.gpu_env import gpu_sharing, slice_name, timing_flags
from distrs.sandbox import Limits, RunResult, Termination
from tests.fixtures.gpu import fake_dev

MIG = "MIG-4f1c0a62-5a2e-5d5c-9f0e-0c1f8b2f1a77"


@pytest.mark.parametrize(
    ("env", "sharing", "flags"),
    [
        ({}, "exclusive", []),
        ({"DISTRS_GPU_RESOURCE": "nvidia.com/gpu", "CUDA_VISIBLE_DEVICES": "GPU-1"}, "exclusive", []),
        ({"DISTRS_GPU_RESOURCE": "nvidia.com/mig-1g.10gb"}, "mig", ["mig_slice"]),
        ({"NVIDIA_VISIBLE_DEVICES": MIG}, "mig", ["mig_slice"]),  # the device says so
        ({"DISTRS_GPU_SHARING": "time-sliced"}, "time-sliced", ["time_sliced_gpu"]),
        ({"DISTRS_GPU_SHARING": "exclusive", "NVIDIA_VISIBLE_DEVICES": MIG}, "exclusive", []),
        ({"DISTRS_GPU_SHARING": "bogus"}, "exclusive", []),
    ],
)
def test_sharing_and_flags(env: dict[str, str], sharing: str, flags: list[str]) -> None:
    assert gpu_sharing(env) == sharing
    got = timing_flags(env)
    assert [f["flag"] for f in got] == flags
    assert all(set(f) == {"flag", "why"} and f["why"] for f in got)


def test_mig_flag_names_the_slice_profile() -> None:
    env = {"DISTRS_GPU_RESOURCE": "nvidia.com/mig-1g.10gb", "CUDA_VISIBLE_DEVICES": MIG}
    assert slice_name(env) == "1g.10gb"
    assert "MIG slice 1g.10gb" in timing_flags(env)[0]["why"]
    assert slice_name({"CUDA_VISIBLE_DEVICES": MIG}) == MIG
    assert "unfit to rank" in timing_flags({"DISTRS_GPU_SHARING": "time-sliced"})[0]["why"]


class EchoSandbox:
    """Runs nothing: every 'run' of the binary prints 'ok' in 10 ms."""

    isolation = "fake"

    @contextmanager
    def session(self) -> Iterator[EchoSandbox]:
        yield self

    @property
    def path(self) -> Path:
        return Path("/nonexistent")

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        return self.path / name

    def run(self, argv: Sequence[str], *, limits: Limits, **kw: Any) -> RunResult:
        return RunResult(Termination.EXITED, 0, None, b"ok\n", b"", 0.01, 0.01)


@pytest.mark.parametrize(
    ("env", "flags"),
    [
        ({}, []),
        ({"DISTRS_GPU_RESOURCE": "nvidia.com/mig-1g.10gb"}, ["mig_slice"]),
        ({"DISTRS_GPU_SHARING": "time-sliced"}, ["time_sliced_gpu"]),
    ],
)
def test_cuda_execute_result_carries_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], flags: list[str]
) -> None:
    for var in (
        "DISTRS_GPU_SHARING",
        "DISTRS_GPU_RESOURCE",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    ):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    h = ExecuteHandler(EchoSandbox(), dev=str(fake_dev(tmp_path)))  # type: ignore[arg-type]
    assert h.ready() == (True, "")
    payload = {"code": "x", "tests": [{"stdin": "", "expected_stdout": "ok"}], "reference_time_s": 0.02}
    inp = StageInput(
        "r", "t", "cuda", "execute", payload, {"binary": base64.b64encode(b"\x7fELF").decode()}, 30
    )
    out = h.run(inp)
    assert out.status is Status.OK and out.detail["speedup"] == pytest.approx(2.0, rel=0.5)
    assert [f["flag"] for f in out.detail["flags"]] == flags


def test_mig_slice_jail_gets_the_capability_nodes(tmp_path: Path) -> None:
    """A MIG slice is opened through /dev/nvidia-caps: the jail must see those nodes too."""
    from distrs.rewards.cuda import gpu_mounts

    dev = fake_dev(tmp_path, mig_caps=True)
    m = gpu_mounts(str(dev))
    assert f"{dev}/nvidia-caps/nvidia-cap1" in m.dev_paths and f"{dev}/nvidia0" in m.dev_paths
