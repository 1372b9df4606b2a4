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
import gc
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distrs_client import NotFoundError, SessionClient

from tests.fixtures.service import TRAINER_A, Service, running_service
from tests.integration.compat.framework_sources import VERL, load_module, source
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


class AgentData:
    """The fields of verl 0.9.1's ``AgentData`` that its tool call path reads."""

    def __init__(self, request_id: str, tools_kwargs: dict[str, Any]) -> None:
        self.request_id = request_id
        self.tools_kwargs = tools_kwargs


async def call_tool_as_verl(tool: Any, name: str, args: dict[str, Any], agent_data: AgentData) -> Any:
    """What verl 0.9.1's ``ToolAgentLoop._call_tool`` does for a ``BaseTool`` (checked against the
    wheel's source below): a fresh instance around every single call."""
    kwargs = agent_data.tools_kwargs.get(name, {})
    instance_id, _ = await tool.create(create_kwargs=kwargs.get("create_kwargs", {}))
    try:
        return await tool.execute(instance_id, args, agent_data=agent_data)
    finally:
        await tool.release(instance_id)


def test_verl_09_agent_loop_calls_keep_state_per_trajectory(
    svc: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_src = source(*VERL, "verl/experimental/agent_loop/tool_agent_loop.py").read_text()
    for line in (
        'instance_id, _ = await tool.create(create_kwargs=kwargs.get("create_kwargs", {}))',
        "instance_id, tool_args, agent_data=agent_data",
        "await tool.release(instance_id)",
    ):
        assert line in loop_src  # the reproduction above is still what verl does
    registry = verl_registry()
    monkeypatch.setenv("DISTRS_TEST_TRAINER_TOKEN", TRAINER_A)
    config = (
        write_config(tmp_path, svc.url, "")
        .read_text()
        .replace("max_output_chars: 2000", "step_reward: tests")
    )
    (tmp_path / "tools.yaml").write_text(config)
    [tool] = registry.initialize_tools_from_config(str(tmp_path / "tools.yaml"))
    tests = {"create_kwargs": {"tests": [{"code": "assert total == 6"}]}}

    async def rollouts() -> tuple[list[Any], list[Any], str]:
        a = AgentData("traj-a", {"code_interpreter": tests})
        b = AgentData("traj-b", {"code_interpreter": tests})
        out_a = [await call_tool_as_verl(tool, "code_interpreter", {"code": "total = 1"}, a)]
        out_b = [await call_tool_as_verl(tool, "code_interpreter", {"code": "total = 100"}, b)]
        out_a.append(await call_tool_as_verl(tool, "code_interpreter", {"code": "total += 5\ntotal"}, a))
        out_b.append(await call_tool_as_verl(tool, "code_interpreter", {"code": "total"}, b))
        sid = tool._sessions["trajectory:traj-a"].session_id
        del a, b  # verl drops the trajectories: their sessions go
        gc.collect()
        await asyncio.sleep(0.5)
        assert tool._sessions == {}
        return out_a, out_b, sid

    out_a, out_b, sid = asyncio.run(rollouts())
    assert [r.text for r, _, _ in out_a] == ["[no output]", "6"]
    assert [step for _, step, _ in out_a] == [0.0, 1.0]  # step rewards: the tests on the state
    assert out_b[1][0].text == "100"  # the other trajectory's state is its own
    with SessionClient(svc.url, TRAINER_A) as client, pytest.raises(NotFoundError) as e:
        client.session(sid).exec("total")
    assert e.value.code == "session_deleted"


def test_the_documented_overrides_are_keys_of_verls_rollout_config() -> None:
    import re

    import yaml

    doc = (Path(__file__).resolve().parents[3] / "docs" / "trainers.md").read_text()
    section = doc.split("### verl: multi-turn tools on sessions", 1)[1].split("## TRL", 1)[0]
    [block] = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    rollout = yaml.safe_load(source(*VERL, "verl/trainer/config/rollout/rollout.yaml").read_text())
    for line in block.split():
        key, _, _ = line.partition("=")
        node: Any = rollout
        for part in key.removeprefix("actor_rollout_ref.rollout.").split("."):
            assert isinstance(node, dict) and part in node, line
            node = node[part]
    tools = yaml.safe_load(re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)[0])
    assert tools["tools"][0]["class_name"] == CLASS and tools["tools"][0]["config"]["type"] == "native"
