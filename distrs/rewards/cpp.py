"""The ``cpp`` reward type: ``compile`` (g++ in the sandbox) then ``run`` against test cases.

The compile stage ships the binary to the run stage as a base64 artifact (``binary``); the
payload carries the tests along. Compiler and flags come from ``DISTRS_JUDGE_CXX(_FLAGS)``,
never from the payload (flags such as ``-fplugin`` would run arbitrary code at compile time).
"""

from __future__ import annotations

from distrs.core.reward_type import RewardType
from distrs.rewards.base import StageInput, StageOutput, stage_budget
from distrs.rewards.cxx_pch import PchUse
from distrs.rewards.judge import handler
from distrs.rewards.judge.cases import fetch_outputs, run_tests, verdict_output, write_inputs
from distrs.rewards.judge.handler import BINARY, JudgedHandler, binary_artifact
from distrs.rewards.judge.limits import LIMITS_CUT_ARTIFACT, case_limits, limit_cuts
from distrs.rewards.judge.payload import JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits


class CompileHandler(handler.CompileHandler):
    """g++ → artifact ``binary``; compile errors end the request ``compile_error``."""

    source = "main.cpp"

    def compiler(self) -> list[str]:
        return [self._settings.cxx, *self._settings.cxx_flags]

    def pch(self) -> PchUse | None:
        """``bits/stdc++.h`` precompiled for this compiler and these flags (``cxx_pch.py``)."""
        return self.cxx_pch.use(self.sandbox.isolation)

    def ready(self) -> tuple[bool, str]:
        ok, why = super().ready()
        if ok:
            self.pch()  # the worker's first readiness check starts making the header
        return ok, why


class RunHandler(JudgedHandler):
    """Runs the compiled ``binary`` once per test case."""

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        binary = binary_artifact(inp)
        if isinstance(binary, StageOutput):
            return binary
        sandbox = self.sandbox
        check = self.special_judge(inp, p)
        limits = case_limits(p, self._settings, Limits())
        with sandbox.session() as s:
            write_inputs(s, p)
            s.write_file(BINARY, binary, executable=True)
            v = run_tests(s, ["./" + BINARY], p, limits, stage_budget(inp), check=check)
            files = fetch_outputs(s, p)
        cut = limit_cuts(
            p, self._settings, inp.stage, inp.timeout_s, earlier=inp.artifacts.get(LIMITS_CUT_ARTIFACT)
        )
        return verdict_output(v, p, sandbox.isolation, files, **cut)


# Entry point ``cpp`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="cpp",
    stages=("compile", "run"),
    handlers={"compile": CompileHandler, "run": RunHandler},
    settings=JudgeSettings,
)
