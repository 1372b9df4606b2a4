"""Optional extras: a type whose extra (its descriptor's) is missing is named as not ready, never
silently served."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from distrs.core.extras import missing_extra
from distrs.core.pipeline_config import load_pipelines
from distrs.worker.loop import Worker


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *a: Any, **kw: Any) -> Any:
        return None if name == "torch" else real(name, *a, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_extra_names_the_extra_and_the_module(no_torch: None) -> None:
    why = missing_extra("kernelbench")
    assert why is not None and "'kernels'" in why and "torch" in why and "ninja" not in why.split("(")[1]
    assert missing_extra("cpp") is None and missing_extra("no-such-type") is None
    assert load_pipelines().reward_types["kernelbench"].extra.missing() == why  # type: ignore[union-attr]


def test_worker_serving_every_type_skips_one_without_its_extra(no_torch: None) -> None:
    table = load_pipelines()
    w = Worker("compile", client=None, table=table, handler_for=lambda t, s: None)  # type: ignore[arg-type]
    assert "kernelbench" not in w.reward_types and {"cpp", "cuda"} <= set(w.reward_types)
    # asked for explicitly, it is served (and its handler says why it is not ready)
    w = Worker(
        "compile",
        client=None,
        table=table,
        reward_types=["kernelbench"],
        handler_for=lambda t, s: None,  # type: ignore[arg-type]
    )
    assert w.reward_types == ["kernelbench"]
