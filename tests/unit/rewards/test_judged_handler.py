"""The shared judged-handler skeleton: payload validation, the binary artifact and the compile argv."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards import cpp, cuda
from distrs.rewards.base import MiB, StageInput
from distrs.rewards.judge.handler import CompileHandler
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox import Limits, RunResult, Termination
from distrs.sandbox.jail import JAIL_WORKDIR

S = JudgeSettings(cxx="c++x", cxx_flags=["-A"], nvcc="nvccx", nvcc_flags=["-B"], compile_memory_mb=100)
CODE = "int main(){}"
PAYLOAD = {"code": CODE, "tests": [{"stdin": "", "expected_stdout": ""}]}


class RecordingSandbox:
    """Records what the compiler was asked to do; the compiler 'fails' with exit 1."""

    isolation = "fake"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[list[str], Limits, Any]] = []

    @contextmanager
    def session(self) -> Iterator[RecordingSandbox]:
        yield self

    @property
    def path(self) -> Path:
        return Path("/nonexistent")

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        self.files[name] = data
        return self.path / name

    def run(self, argv: Sequence[str], *, limits: Limits, **kw: Any) -> RunResult:
        self.calls.append((list(argv), limits, kw.get("env")))
        return RunResult(Termination.EXITED, 1, None, b"", b"main: error: nope", 0.1, 0.1)


def _inp(stage: str, payload: Any = PAYLOAD, artifacts: dict[str, str] | None = None) -> StageInput:
    return StageInput("r", "t", "cpp", stage, payload, artifacts or {}, timeout_s=30)


@pytest.mark.parametrize(
    ("handler", "argv", "memory_mb", "env"),
    [
        (cpp.CompileHandler, ["c++x", "-A", "-o", "prog", "main.cpp"], 100, None),
        (
            cuda.CompileHandler,
            ["{home}/bin/nvccx", "-B", "-o", "prog", "main.cu"],
            8192,
            {"TMPDIR": JAIL_WORKDIR},
        ),
    ],
)
def test_compile_runs_the_types_compiler_and_reports_its_errors(
    handler: type[CompileHandler], argv: list[str], memory_mb: int, env: dict[str, str] | None, tmp_path: Path
) -> None:
    sb = RecordingSandbox()
    home = fake_toolkit(tmp_path, "nvccx")
    settings = S.model_copy(update={"cuda_home": str(home)})
    out = handler(sb, settings).run(_inp("compile"))  # type: ignore[arg-type]
    assert out.status is Status.COMPILE_ERROR and "nope" in out.detail["compiler_output"]
    assert sb.files == {argv[-1]: CODE.encode()}
    [(got_argv, limits, got_env)] = sb.calls
    assert got_argv == [a.format(home=home) for a in argv]
    assert limits.memory_bytes == memory_mb * MiB and got_env == env


def fake_toolkit(root: Path, name: str = "nvcc") -> Path:
    """A CUDA toolkit directory whose bin holds an executable ``name``."""
    (root / "cuda" / "bin").mkdir(parents=True, exist_ok=True)
    exe = root / "cuda" / "bin" / name
    exe.write_text("#!/bin/sh\nexit 1\n")
    exe.chmod(0o755)
    return root / "cuda"


def test_nvcc_is_found_under_cuda_home_and_run_by_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standard install has nvcc only in CUDA_HOME/bin, on no PATH the jail has."""
    home = fake_toolkit(tmp_path)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("PATH", "/nonexistent")
    h = cuda.CompileHandler(RecordingSandbox(), JudgeSettings())  # type: ignore[arg-type]
    assert h.compiler()[0] == str(home / "bin" / "nvcc")
    assert h.ready() == (True, "")
    mounts = h.tool_mounts()  # outside the jail's /usr: its toolkit is bound read-only
    assert mounts is not None and str(home) in mounts.ro_paths


def test_no_nvcc_anywhere_is_not_ready_and_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path))
    settings = JudgeSettings(nvcc="nvcc-missing")
    h = cuda.CompileHandler(RecordingSandbox(), settings)  # type: ignore[arg-type]
    ok, why = h.ready()
    assert not ok and f"{tmp_path}/none/bin" in why and "/usr/local/cuda/bin" in why and "PATH" in why
    out = h.run(_inp("compile"))
    assert out.status is Status.INTERNAL_ERROR and "no CUDA compiler" in out.detail["error"]


def test_bad_payload_is_invalid_before_the_sandbox_is_touched() -> None:
    sb = RecordingSandbox()
    for h in (cpp.CompileHandler(sb, S), cpp.RunHandler(sb, S), PythonRunHandler(sb, S)):  # type: ignore[arg-type]
        out = h.run(_inp("x", {"code": "", "tests": []}))
        assert out.status is Status.INVALID and out.detail["error"]["field"] == "code"
    assert sb.calls == [] and sb.files == {}


def test_run_without_binary_artifact_is_an_internal_error() -> None:
    sb = RecordingSandbox()
    out = cpp.RunHandler(sb, S).run(_inp("run"))  # type: ignore[arg-type]
    assert out.status is Status.INTERNAL_ERROR and "binary" in out.detail["error"]
    assert sb.calls == []
