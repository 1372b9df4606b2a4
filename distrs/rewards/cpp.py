"""The ``cpp`` reward type: ``compile`` (g++ in the sandbox) then ``run`` against test cases.

The compile stage ships the binary to the run stage as a base64 artifact (``binary``); the
payload carries the tests along. Compiler and flags come from ``DISTRS_JUDGE_CXX(_FLAGS)``,
never from the payload (flags such as ``-fplugin`` would run arbitrary code at compile time).
"""

from __future__ import annotations

from distrs.rewards import cxx_pch, judged_handler
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.cxx_pch import PchUse
from distrs.rewards.judge import (
    LIMITS_CUT_ARTIFACT,
    JudgedPayload,
    case_limits,
    fetch_outputs,
    limit_cuts,
    run_tests,
    stage_budget,
    verdict_output,
    write_inputs,
)
from distrs.rewards.judged_handler import BINARY, JudgedHandler, binary_artifact
from distrs.sandbox import Limits


class CompileHandler(judged_handler.CompileHandler):
    """g++ → artifact ``binary``; compile errors end the request ``compile_error``."""

    source = "main.cpp"

    def compiler(self) -> list[str]:
        return [self._settings.cxx, *self._settings.cxx_flags]

    def pch(self) -> PchUse | None:
        """``bits/stdc++.h`` precompiled for this compiler and these flags (``cxx_pch.py``)."""
        return cxx_pch.for_judge(self._settings, self.sandbox.isolation)

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


# Entry point ``cpp`` of group ``distrs.rewards`` (pyproject.toml): stage -> handler factory.
HANDLERS = {"compile": CompileHandler, "run": RunHandler}
