"""Reward plugins found through entry points and run in the real bwrap jail."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrs.core.installed import installed_types
from distrs.core.model import Status
from distrs.core.pipeline_config import load_pipelines
from distrs.rewards import registry
from distrs.rewards.base import StageInput
from distrs.rewards.plugin import PluginHandler, PluginSettings
from distrs.sandbox.local import LocalSandbox
from tests.integration.rewards.plugin_fixtures import EXAMPLE, install


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = install(tmp_path_factory.mktemp("plugins"))
    sys.path[:0] = [str(root), str(EXAMPLE)]
    installed_types.cache_clear()
    yield root
    sys.path.remove(str(root))
    sys.path.remove(str(EXAMPLE))
    installed_types.cache_clear()


@pytest.fixture(params=[True, False], ids=["zygote", "jail-per-call"])
def sandbox(request: pytest.FixtureRequest, bwrap_sandbox: LocalSandbox) -> Iterator[LocalSandbox]:
    """The jail as a call gets it: forked from a zygote (a root worker, or root of a user namespace of its own) or
    a jail and an interpreter per call."""
    if request.param and os.geteuid() != 0:
        pytest.skip("a zygote needs a root worker (or root of a user namespace of its own)")
    bwrap_sandbox.plugin_zygote = request.param  # type: ignore[attr-defined]
    yield bwrap_sandbox
    if request.param:  # the calls did go through the zygote
        assert bwrap_sandbox._zygotes and all(z.started == 1 for z in bwrap_sandbox._zygotes.values())
    bwrap_sandbox.close_zygotes()


def run(sb: LocalSandbox, entry: str, payload: dict[str, Any], timeout_s: float = 30.0) -> Any:
    zygote = getattr(sb, "plugin_zygote", False)
    h = PluginHandler(entry, sb, PluginSettings(timeout_s=timeout_s, zygote=zygote))
    return h.run(StageInput("r", "t", "x", "verify", payload, timeout_s=timeout_s))


def test_entry_points_register_plugins_like_builtins(plugin_path: Path) -> None:
    known = registry.registered()
    assert ("exact_match", "verify") in known and ("keywords", "verify") in known
    assert ("cpp", "compile") in known and ("math", "verify") in known  # built-ins: same mechanism
    table = load_pipelines()
    assert table.reward_types["keywords"].stages == ("verify",)
    with pytest.raises(KeyError, match="nope"):
        registry.get_handler("nope", "verify")


def test_example_plugin_scores_in_the_jail(plugin_path: Path, sandbox: LocalSandbox) -> None:
    h = registry.get_handler("exact_match", "verify")
    assert h.ready() == (True, "")
    ok = h.run(
        StageInput("r", "t", "exact_match", "verify", {"completion": " Paris ", "ground_truth": "paris"})
    )
    assert ok.status is Status.OK and ok.score == 1.0
    out = run(
        sandbox,
        "distrs_example_reward.scoring:keywords",
        {"completion": "Paris, France", "keywords": ["paris", "rome"]},
    )
    assert out.status is Status.OK and out.score == 0.5
    out = run(sandbox, "distrs_example_reward.scoring:exact_match", {"completion": 3, "ground_truth": "3"})
    assert out.status is Status.INVALID


def test_a_raising_plugin_is_an_internal_error_for_that_request(
    plugin_path: Path, sandbox: LocalSandbox
) -> None:
    out = run(sandbox, "bad_plugins:boom", {"completion": "x"})
    assert out.status is Status.INTERNAL_ERROR
    assert "RuntimeError: plugin bug on x" in out.detail["error"]["message"]
    out = run(sandbox, "bad_plugins:garbage", {})
    assert out.status is Status.INTERNAL_ERROR and "'one'" in out.detail["error"]["message"]
    out = run(sandbox, "distrs_example_reward.scoring:keywords", {"completion": "x"})  # KeyError
    assert out.status is Status.INTERNAL_ERROR and "KeyError" in out.detail["error"]["message"]


def test_a_hanging_plugin_times_out(plugin_path: Path, sandbox: LocalSandbox) -> None:
    out = run(sandbox, "bad_plugins:hang", {}, timeout_s=2.0)
    assert out.status is Status.TIMEOUT
    assert run(sandbox, "bad_plugins:shout", {"completion": "ok"}).detail["text"] == "OK"


def test_plugin_output_cannot_forge_the_reply_nor_see_service_env(
    plugin_path: Path, sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = run(sandbox, "bad_plugins:forge", {})
    assert out.status is Status.WRONG_ANSWER and out.score == 0.0
    monkeypatch.setenv("DISTRS_TOKENS", "secret-token:admin")
    out = run(sandbox, "bad_plugins:secret", {})
    assert out.detail["env"] == []


def test_nothing_of_one_call_reaches_the_next(plugin_path: Path, sandbox: LocalSandbox) -> None:
    """A call leaves a module global, an environment variable, files in its work dir and /tmp,
    and a daemon in a session of its own that ignores SIGTERM; the next call finds none of them
    (the same call does, so the check can fail), and the daemon died with its call."""
    first = run(sandbox, "bad_plugins:leave", {"plant": True})
    assert first.detail["seen"] == {"global": True, "env": True, "work": True, "tmp": True}, first
    again = run(sandbox, "bad_plugins:leave", {"plant": False})
    assert again.detail["seen"] == {"global": False, "env": False, "work": False, "tmp": False}, again
    assert not _sleepers(), "the first call's daemon outlived it"


def _sleepers() -> list[int]:
    """Host pids of the daemon ``bad_plugins:leave`` starts (a moment allowed for the kill)."""
    found: list[int] = []
    for _ in range(20):
        found = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if b"time.sleep(600)" in (d / "cmdline").read_bytes():
                        found.append(int(d.name))
                except OSError:
                    pass
        if not found:
            return found
        time.sleep(0.1)
    return found


def test_a_plugin_over_its_output_limit_is_an_internal_error(
    plugin_path: Path, sandbox: LocalSandbox
) -> None:
    out = run(sandbox, "bad_plugins:flood", {})
    assert out.status is Status.INTERNAL_ERROR, out
