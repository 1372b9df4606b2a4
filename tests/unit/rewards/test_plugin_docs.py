"""A reward type written from docs/plugins.md alone: the page's example module and entry point,
installed as a package would be, is served like a built-in (pipeline table, worker handlers, its
settings from the environment)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrs.core.installed import installed_types
from distrs.core.model import Status
from distrs.core.pipeline_config import load_pipelines
from distrs.rewards.base import StageInput
from distrs.rewards.registry import registered
from distrs.worker.loop import Worker

DOC = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def example_module() -> str:
    (source,) = [b for b in blocks("python") if "REWARD_TYPE = RewardType(" in b]
    return source


def example_entry_point() -> str:
    (toml,) = [b for b in blocks("toml") if "REWARD_TYPE" in b]
    (line,) = [ln.split("#")[0].strip() for ln in toml.splitlines() if "=" in ln and "[" not in ln]
    return line.replace('"', "")


@pytest.fixture
def length_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example installed: its module and a distribution's metadata naming the entry point."""
    name, _, value = (p.strip() for p in example_entry_point().partition("="))
    module = value.partition(":")[0]
    (tmp_path / f"{module}.py").write_text(example_module())
    dist = tmp_path / "length_reward-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: length-reward\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(f"[distrs.rewards]\n{name} = {value}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed_types.cache_clear()
    yield tmp_path
    installed_types.cache_clear()
    sys.modules.pop(module, None)


def test_the_documented_type_is_served(length_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = load_pipelines()
    rt = table.reward_types["length"]
    assert rt.stages == ("verify",) and table.timeout_s("length", "verify") == 30.0
    monkeypatch.setenv("LENGTH_REWARD_TOLERANCE", "0.5")  # its settings, read when handlers are made
    handler = registered(table)[("length", "verify")]()
    assert handler.ready() == (True, "")

    def run(payload: object) -> tuple[Status | None, float, dict[str, object]]:
        out = handler.run(StageInput("r", "t", "length", "verify", payload, timeout_s=30))  # type: ignore[arg-type]
        return out.status, out.score, out.detail

    assert run({"completion": "one two three", "target_words": 4}) == (
        Status.OK,
        0.75,
        {"words": 3, "target": 4},
    )  # 25 % off, within the tolerance of 0.5 from the environment
    assert run({"completion": "one", "target_words": 4})[:2] == (Status.WRONG_ANSWER, 0.25)
    status, _, detail = run({"completion": "x", "target_words": 0})
    assert status is Status.INVALID and detail["error"] == {
        "field": "target_words",
        "message": "must be a whole number >= 1",
    }


def test_a_worker_of_its_stage_serves_it_beside_the_builtins(length_package: Path) -> None:
    table = load_pipelines()
    w = Worker("verify", client=None, table=table)  # type: ignore[arg-type]
    assert {"length", "math"} <= set(w.reward_types)
    assert type(w._handlers["length"]).__name__ == "LengthHandler"
    assert "length" not in w.readiness()[1]  # it is ready, whatever the others say
