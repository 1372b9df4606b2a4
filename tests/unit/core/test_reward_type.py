"""A reward type's descriptor: what it checks of itself, its route hook, and the three kinds of
``distrs.rewards`` entry point that yield one (a descriptor, a handler table, a scorer)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from distrs.core.installed import ENTRY_POINT_GROUP, entry_point_type
from distrs.core.reward_type import RewardType

MODULE = """
from distrs.core.reward_type import RewardType

class Handler:
    def __init__(self, settings=None):
        self.settings = settings

REWARD_TYPE = RewardType(name="mine", stages=("compile", "run"), handlers={"run": Handler})
HANDLERS = {"run": Handler, "compile": Handler}
"""
BAD_MODULE = """
REWARD_TYPE = "not a descriptor"
HANDLERS = {"run": 3}
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "my_reward_pkg.py").write_text(MODULE)
    (tmp_path / "bad_reward_pkg.py").write_text(BAD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_reward_pkg"
    sys.modules.pop("my_reward_pkg", None)
    sys.modules.pop("bad_reward_pkg", None)


def ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_a_descriptor_entry_point_loads_the_descriptor(module: str) -> None:
    rt = entry_point_type(ep("mine", f"{module}:REWARD_TYPE"))
    assert rt is not None and rt.stages == ("compile", "run") and set(rt.handlers) == {"run"}


def test_a_handler_table_is_a_type_of_its_stages_in_order(module: str) -> None:
    rt = entry_point_type(ep("tbl", f"{module}:HANDLERS"))
    assert rt is not None and rt.name == "tbl" and rt.stages == ("run", "compile") and rt.plugin is None


def test_any_other_attribute_is_a_scorer_plugin_and_is_not_imported(module: str) -> None:
    rt = entry_point_type(ep("score", "never_imported_pkg.scoring:score"))
    assert rt is not None and rt.plugin == "never_imported_pkg.scoring:score" and rt.stages == ("verify",)
    assert "never_imported_pkg" not in sys.modules and not rt.handlers


@pytest.mark.parametrize(
    ("name", "value", "logged"),
    [
        ("other", "my_reward_pkg:REWARD_TYPE", "is not the RewardType named 'other'"),
        ("bad", "bad_reward_pkg:REWARD_TYPE", "is not the RewardType named 'bad'"),
        ("bad", "bad_reward_pkg:HANDLERS", "is not a {stage: handler factory} mapping"),
        ("mine", "no_such_pkg_at_all:REWARD_TYPE", "failed to load"),
        ("bad", "not a path", "is not 'module:attribute'"),
    ],
)
def test_an_entry_point_that_declares_no_type_is_skipped_and_logged(
    module: str, name: str, value: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert entry_point_type(ep(name, value)) is None
    assert logged in caplog.text


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"stages": ()}, "has no stages"),
        ({"stages": ("run", "run")}, "names a stage twice"),
        ({"timeouts": {"compile": 5}}, "not one of its stages"),
        ({"timeouts": {"run": 0}}, "must be > 0"),
        ({"stages": ("run", "verify"), "plugin": "m:f"}, "exactly one stage"),
    ],
)
def test_a_descriptor_refuses_what_cannot_be_served(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        RewardType(**{"name": "t", "stages": ("run",), **fields})


def keep(stages: Sequence[str], payload: Mapping[str, Any]) -> Sequence[str]:
    return list(payload["keep"])


def test_the_route_hook_picks_an_ordered_subset_and_nothing_else() -> None:
    rt = RewardType(name="t", stages=("a", "b", "c"), route=keep)
    assert rt.visits({"keep": ["a", "c"]}) == ["a", "c"]
    assert RewardType(name="u", stages=("a", "b")).visits({}) == ["a", "b"]  # no hook: every stage
    for bad in (["c", "a"], ["a", "x"], []):
        with pytest.raises(ValueError, match="not an ordered subset"):
            rt.visits({"keep": bad})
