"""A plugin's return value as a result (pure), and plugin declarations in the pipelines YAML."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from distrs.core.model import Status
from distrs.core.pipeline_config import load_pipelines, table_from_mapping
from distrs.rewards.plugin import normalize


@pytest.mark.parametrize(
    ("value", "status", "score"),
    [
        (1.0, Status.OK, 1.0),
        (0, Status.WRONG_ANSWER, 0.0),
        (0.25, Status.OK, 0.25),
        (-1.0, Status.WRONG_ANSWER, -1.0),  # verl-style penalties pass through
        (True, Status.OK, 1.0),
        (False, Status.WRONG_ANSWER, 0.0),
        ({"score": 0.5, "detail": {"why": "half"}}, Status.OK, 0.5),
        ({"score": 0.0, "status": "invalid"}, Status.INVALID, 0.0),
        ({"score": 1, "status": "ok"}, Status.OK, 1.0),
    ],
)
def test_valid_returns(value: Any, status: Status, score: float) -> None:
    out = normalize(value)
    assert out.status is status and out.score == score


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1.0",
        [1],
        math.nan,
        math.inf,
        {"status": "ok"},
        {"score": 1, "status": "great"},
        {"score": 1, "detail": 3},
    ],
)
def test_malformed_returns_are_internal_errors(value: Any) -> None:
    out = normalize(value)
    assert out.status is Status.INTERNAL_ERROR and out.detail["error"]["source"] == "plugin"


def test_yaml_plugin_types() -> None:
    base = load_pipelines()
    data = {
        "stages": {name: {"timeout_s": s.timeout_s} for name, s in base.stages.items()},
        "reward_types": {
            "em": {"plugin": "my_pkg.scoring:exact_match"},
            "essay": {"stages": ["run"], "plugin": "my_pkg.essay:score"},
        },
    }
    table = table_from_mapping(data)
    assert table.reward_types["em"].stages == ("verify",)
    assert table.reward_types["essay"].stages == ("run",)
    assert table.reward_types["em"].plugin == "my_pkg.scoring:exact_match"
    assert table.reward_types["essay"].plugin == "my_pkg.essay:score"


@pytest.mark.parametrize(
    "spec",
    [
        {"plugin": "not a path"},
        {"plugin": "pkg.mod"},  # no function
        {"stages": ["verify", "run"], "plugin": "pkg.mod:f"},  # a plugin runs at one stage
        {"plugin": "pkg.mod:f", "extra": 1},
    ],
)
def test_bad_plugin_declarations_name_the_field(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as e:
        table_from_mapping({"stages": {"verify": {}, "run": {}}, "reward_types": {"x": spec}})
    assert "reward_types.x" in str(e.value)
