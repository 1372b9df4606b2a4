"""The verl session tool loaded the way verl loads tools: verl 0.9.1's own ``BaseTool``,
``schemas`` and ``tool_registry.initialize_tools_from_config`` (from the published wheel) read a
tool config YAML naming ``distrs_client.adapters.verl_tool.DistrsSessionTool``, with and without
a ``tool_schema``; then a trajectory runs as verl's agent loop drives a tool (``create``, several
``execute`` calls that build on each other, ``calc_reward``, ``release``) against the live service.

verl's ``function_tool`` module (which ``tool_registry`` imports for tools declared as python
functions, not used here) imports transformers, so it is stubbed; ``rollout_trace`` is verl's own.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.service import TRAINER_A, Service, running_service
from tests.integration.compat.framework_sources import VERL, load_module
from tests.requirements import need_module

CLASS = "distrs_client.adapters.verl_tool.DistrsSessionTool"


def verl_registry() -> types.ModuleType:
    need_module("omegaconf", "verl's tool registry reads the tool config YAML with it")
    function_tool = types.ModuleType("verl.tools.function_tool")
    function_tool.__dict__.update(FunctionTool=object, load_function_tools_from_path=lambda path: [])
    ray_utils = types.ModuleType("verl.utils.ray_utils")
    ray_utils.__dict__.update(get_event_loop=asyncio.get_event_loop)
    stubs = {"verl.tools.function_tool": function_tool, "verl.utils.ray_utils": ray_utils}
    load_module(*VERL, "verl/utils/rollout_trace.py", stubs=stubs)
    load_module(*VERL, "verl/tools/schemas.py")
    load_module(*VERL, "verl/tools/base_tool.py")
    return load_module(*VERL, "verl/tools/tool_registry.py", stubs=stubs)


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    env = {"DISTRS_SANDBOX_UID_BASE": "64200", "DISTRS_SANDBOX_UID_COUNT": "16"}
    with running_service(env=env) as s:
        s.start_session_worker()
        yield s


def write_config(tmp_path: Path, url: str, schema: str) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(
        f"""
tools:
  - class_name: {CLASS}
    config:
      type: native
      url: {url}
      token_env: DISTRS_TEST_TRAINER_TOKEN
      task: verl-task
      language: python
      timeout_s: 10
      max_output_chars: 2000
{schema}
"""
    )
    return path


EXPLICIT = """    tool_schema:
      type: function
      function:
        name: run_python
        description: Run python.
        parameters:
          type: object
          properties:
            code: {type: string, description: the code}
          required: [code]
"""


def test_verl_loads_the_tool_with_the_default_schema_and_with_its_own(
    svc: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = verl_registry()
    monkeypatch.setenv("DISTRS_TEST_TRAINER_TOKEN", TRAINER_A)
    [tool] = registry.initialize_tools_from_config(str(write_config(tmp_path, svc.url, "")))
    base = sys.modules["verl.tools.base_tool"]
    assert isinstance(tool, base.BaseTool) and tool.name == "code_interpreter"
    params = tool.get_openai_tool_schema().function.parameters
    assert params.required == ["code"] and params.properties["code"].type == "string"
    [named] = registry.initialize_tools_from_config(str(write_config(tmp_path, svc.url, EXPLICIT)))
    assert named.name == "run_python"


def test_a_trajectory_keeps_state_across_tool_calls_and_is_rewarded_on_it(
    svc: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = verl_registry()
    monkeypatch.setenv("DISTRS_TEST_TRAINER_TOKEN", TRAINER_A)
    [tool] = registry.initialize_tools_from_config(str(write_config(tmp_path, svc.url, "")))
    schemas = sys.modules["verl.tools.schemas"]

    async def trajectory() -> tuple[list[Any], float, float]:
        tests = [{"code": "assert fib(10) == 55"}, {"code": "assert fib(1) == 1"}]
        iid, created = await tool.create(files={"notes.txt": "fib"}, tests=tests)
        assert isinstance(created, schemas.ToolResponse)
        calls = [
            {"code": "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"},
            {"code": "print(open('notes.txt').read())\nfib(10)"},
            {"code": "fib(-1) + undefined_name"},
            {"code": 42},  # a malformed call from the policy
        ]
        answers = [await tool.execute(iid, call) for call in calls]
        reward = await tool.calc_reward(iid)
        await tool.release(iid)
        after = await tool.calc_reward(iid)  # released: no session, no reward
        return answers, reward, after

    answers, reward, after = asyncio.run(trajectory())
    texts = [resp.text for resp, _, _ in answers]
    assert texts[1] == "fib\n55"
    assert "NameError" in texts[2] and "undefined_name" in texts[2]
    assert "must be a string" in texts[3]
    assert all(step == 0.0 for _, step, _ in answers)
    assert answers[1][2]["state_survived"] is True
    assert reward == 1.0 and after == 0.0


def test_a_bad_config_names_the_key(svc: Service, tmp_path: Path) -> None:
    verl_registry()
    from distrs_client.adapters.verl_tool import DistrsSessionTool

    with pytest.raises(ValueError, match=r"config\.language"):
        DistrsSessionTool({"type": "native", "url": svc.url, "task": "t", "language": "ruby"}, None)
    with pytest.raises(ValueError, match=r"config\.task"):
        DistrsSessionTool({"type": "native", "url": svc.url}, None)
