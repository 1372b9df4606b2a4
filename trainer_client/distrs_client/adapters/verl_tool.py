"""A verl tool backed by DistRS sessions: one jailed interpreter per trajectory, state kept
across the turns of a multi-turn rollout, the reward computed on the state the trajectory left.

verl drives a tool through its ``BaseTool`` interface (``verl/tools/base_tool.py``): the agent
loop calls ``create`` once per trajectory, ``execute`` for every tool call the policy makes,
``calc_reward`` at the end and ``release``; tools are declared in a YAML file that
``verl.tools.tool_registry.initialize_tools_from_config`` reads (``class_name``, ``config`` with
``type: native``, and a ``tool_schema`` that may be left out). This module maps that onto the
session API:

* ``create`` registers an instance; its session opens on the first ``execute`` (``files`` of the
  sample's ``create_kwargs`` are written into it; its ``tests``, if any, are kept for the reward);
* ``execute`` runs the ``code`` argument and answers its output (stdout, stderr, the trailing
  expression's value, the error's traceback), truncated to ``max_output_chars``;
* ``calc_reward`` runs the tests (``reward`` of the session API: each test in a copy of the
  session's state) and returns their score; 0.0 without tests;
* ``release`` deletes the session.

verl 0.9's ``ToolAgentLoop`` calls ``create``, ``execute`` and ``release`` around *every* tool
call (and passes the trajectory's ``agent_data`` to ``execute``): the session is then keyed by the
trajectory's ``request_id``, so state survives from one call to the next, and it is deleted when
verl drops the trajectory (or at its idle timeout). That loop never calls ``calc_reward``: with
``step_reward: tests`` each call returns the tests' score on the state it left as its step reward
(verl keeps those in ``tool_rewards``).

Config keys (``config`` of the YAML; unknown keys are ignored as verl passes its own)::

    url: http://distrs:8000       # or $DISTRS_URL
    token_env: DISTRS_TOKEN       # the env var holding a trainer token (never the token itself)
    task: my-task
    language: python              # or bash
    timeout_s: 30                 # per exec
    idle_timeout_s: 600
    limits: {memory_mb: 1024}
    max_output_chars: 4096
    tests: [...]                  # default tests when a sample brings none
    step_reward: none             # or tests: each call's step reward is the tests' score

Without a ``tool_schema`` the tool describes itself (``get_openai_tool_schema``): a function
``code_interpreter`` (python) or ``bash`` taking one string argument, ``code``.

A session that ended (expired, lost with its worker) answers the policy with a message saying so
rather than a fresh empty interpreter; its reward is 0.0 and the metrics carry the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from distrs_client.errors import APIError, DistrsError
from distrs_client.sessions import AsyncSession, AsyncSessionClient, ExecResult

try:  # verl's tracing decorator, as its own tools use it; absent in a stripped-down verl
    from verl.utils.rollout_trace import rollout_trace_op
except ImportError:  # pragma: no cover - depends on the verl install

    def rollout_trace_op(func: Any) -> Any:
        return func


LANGUAGES = ("python", "bash")
DESCRIPTIONS = {
    "python": "Run Python code in a persistent interpreter: variables, imports and files are kept "
    "between calls, and the value of the last expression is shown.",
    "bash": "Run a bash script in a persistent shell: the working directory, environment variables "
    "and files are kept between calls.",
}


def default_schema(language: str) -> dict[str, Any]:
    """The OpenAI function schema of the tool when the YAML gives none."""
    return {
        "type": "function",
        "function": {
            "name": "code_interpreter" if language == "python" else "bash",
            "description": DESCRIPTIONS[language],
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": f"The {language} code to run."}},
                "required": ["code"],
            },
        },
    }


def render(r: ExecResult, limit: int) -> str:
    """What the policy sees of one exec."""
    parts = []
    if r.stdout:
        parts.append(r.stdout)
    if r.stderr:
        parts.append(f"[stderr]\n{r.stderr}")
    if r.value is not None:
        parts.append(r.value)
    if r.error is not None:
        parts.append(r.error.traceback or f"{r.error.type}: {r.error.message}")
    if r.exit_code not in (None, 0):
        parts.append(f"[exit code {r.exit_code}]")
    if not r.state_survived:
        parts.append("[the interpreter was restarted: variables are gone, files are kept]")
    text = "\n".join(p.rstrip("\n") for p in parts) or "[no output]"
    return text if len(text) <= limit else text[: limit - 20] + "\n...[truncated]"


class DistrsSessionTool(BaseTool):
    """A verl ``BaseTool`` over DistRS sessions (module docstring)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None) -> None:
        self.language = str(config.get("language", "python"))
        if self.language not in LANGUAGES:
            raise ValueError(f"config.language: one of {', '.join(LANGUAGES)}, not {self.language!r}")
        self.url = str(config.get("url") or os.environ.get("DISTRS_URL") or "")
        if not self.url:
            raise ValueError("config.url: the DistRS proxy URL (or set DISTRS_URL)")
        self.task = str(config.get("task") or "")
        if not self.task:
            raise ValueError("config.task: the task the sessions belong to")
        self.token = os.environ.get(str(config.get("token_env", "DISTRS_TOKEN")))
        self.timeout_s = float(config.get("timeout_s", 30.0))
        self.max_output_chars = int(config.get("max_output_chars", 4096))
        self.step_reward = str(config.get("step_reward", "none"))
        if self.step_reward not in ("none", "tests"):
            raise ValueError(f"config.step_reward: none or tests, not {self.step_reward!r}")
        self._create_options: dict[str, Any] = {
            k: config[k] for k in ("idle_timeout_s", "max_lifetime_s", "limits") if config.get(k) is not None
        }
        self._default_tests = list(config.get("tests") or [])
        self._clients: dict[int, AsyncSessionClient] = {}
        self._kwargs: dict[str, dict[str, Any]] = {}  # instance -> its create kwargs
        self._keys: dict[str, str] = {}  # instance -> the key of its session
        self._sessions: dict[str, AsyncSession] = {}  # key -> session
        self._tests: dict[str, list[dict[str, Any]]] = {}  # key -> its tests
        self._pending: set[asyncio.Task[None]] = set()  # deletions under way (kept referenced)
        super().__init__(config, tool_schema)

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        schema = getattr(self, "tool_schema", None)
        if schema is not None:
            return schema
        return OpenAIFunctionToolSchema.model_validate(default_schema(self.language))

    def _client(self) -> AsyncSessionClient:
        """One client per event loop (its connections belong to the loop that made them)."""
        key = id(asyncio.get_running_loop())
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = AsyncSessionClient(self.url, self.token)
        return client

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Register an instance; its session opens on its first ``execute`` (verl 0.9's agent loop
        creates and releases an instance around every single call: see ``_session``)."""
        instance_id = instance_id or str(uuid4())
        nested = kwargs.get("create_kwargs")
        self._kwargs[instance_id] = dict(nested) if isinstance(nested, dict) else dict(kwargs)
        return instance_id, ToolResponse()

    async def _session(self, instance_id: str, agent_data: Any) -> AsyncSession:
        """The session of ``instance_id``'s trajectory, opened on first use.

        verl's classic contract makes one instance per trajectory (``create`` ... ``release``).
        verl 0.9's ``ToolAgentLoop`` instead creates and releases an instance around every tool
        call and passes the trajectory's ``agent_data``: the session is then keyed by its
        ``request_id`` and outlives the call's instance; it is deleted when verl drops the
        trajectory's ``agent_data`` (or, failing that, at its idle timeout)."""
        request_id = getattr(agent_data, "request_id", None)
        key = f"trajectory:{request_id}" if request_id is not None else instance_id
        self._keys[instance_id] = key
        session = self._sessions.get(key)
        if session is None:
            kwargs = self._kwargs.get(instance_id, {})
            session = await self._client().create(
                self.task, self.language, files=kwargs.get("files") or None, **self._create_options
            )
            self._sessions[key] = session
            self._tests[key] = list(kwargs.get("tests") or self._default_tests)
            if request_id is not None:
                weakref.finalize(agent_data, self._drop, key, asyncio.get_running_loop())
        return session

    def _drop(self, key: str, loop: asyncio.AbstractEventLoop) -> None:
        """The trajectory is gone: delete its session (from whatever thread collected it)."""
        session = self._sessions.pop(key, None)
        self._tests.pop(key, None)
        if session is not None and loop.is_running():  # a loop that is gone: the idle timeout
            with contextlib.suppress(RuntimeError):  # the coroutine is made inside the loop, if it runs
                loop.call_soon_threadsafe(
                    lambda: self._pending.add(loop.create_task(_quietly(session.delete())))
                )

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        code = parameters.get("code")
        if not isinstance(code, str):
            return (
                ToolResponse(text="Error: the argument `code` must be a string."),
                0.0,
                {"invalid_call": True},
            )
        try:
            session = await self._session(instance_id, kwargs.get("agent_data"))
            r = await session.exec(code, timeout_s=self.timeout_s)
        except APIError as e:  # the session ended: say so, never a fresh interpreter in its place
            return (
                ToolResponse(text=f"Error: the session ended ({e.code}): {e.message}"),
                0.0,
                {"ended": e.code},
            )
        metrics: dict[str, Any] = {
            "duration_s": r.duration_s,
            "timed_out": r.timed_out,
            "state_survived": r.state_survived,
            "error": r.error.type if r.error else None,
        }
        step = await self.calc_reward(instance_id) if self.step_reward == "tests" else 0.0
        return ToolResponse(text=render(r, self.max_output_chars)), step, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The score of the instance's tests on its session's state (0.0 without either)."""
        key = self._keys.get(instance_id, instance_id)
        session, tests = self._sessions.get(key), self._tests.get(key) or []
        if session is None or not tests:
            return 0.0
        try:
            out = await session.reward(tests, timeout_s=self.timeout_s)
        except DistrsError:
            return 0.0
        return float(out.get("score", 0.0))

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance; delete its session unless it belongs to a trajectory that goes on."""
        self._kwargs.pop(instance_id, None)
        key = self._keys.pop(instance_id, instance_id)
        if key.startswith("trajectory:"):
            return
        session = self._sessions.pop(key, None)
        self._tests.pop(key, None)
        if session is not None:
            await _quietly(session.delete())


async def _quietly(deletion: Any) -> None:
    with contextlib.suppress(DistrsError):  # else it ends by itself at its idle timeout
        await deletion
