"""The ``cpp`` reward type: ``compile`` (g++ in the sandbox) then ``run`` against test cases.

The compile stage ships the binary to the run stage as a base64 artifact (``binary``); the
payload carries the tests along. Compiler and flags come from ``DISTRS_JUDGE_CXX(_FLAGS)``,
never from the payload (flags such as ``-fplugin`` would run arbitrary code at compile time).
"""

from __future__ import annotations

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput, register
from distrs.rewards.judge import (
    InvalidPayload,
    JudgeSettings,
    case_limits,
    compile_program,
    decode_binary,
    encode_binary,
    judge_settings,
    parse_payload,
    run_tests,
    shared_sandbox,
    stage_budget,
    verdict_output,
)
from distrs.sandbox import Limits, Sandbox

SOURCE = "main.cpp"
BINARY = "prog"


class CompileHandler:
    """g++ → artifact ``binary``; compile errors end the request ``compile_error``."""

    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        self._sandbox = sandbox
        self._settings = settings or judge_settings()

    def ready(self) -> tuple[bool, str]:
        return True, ""

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload, self._settings)
        except InvalidPayload as e:
            return e.output()
        sandbox = self._sandbox or shared_sandbox()
        timeout = min(self._settings.compile_time_s, stage_budget(inp))
        with sandbox.session() as s:
            s.write_file(SOURCE, p.code.encode())
            argv = [self._settings.cxx, *self._settings.cxx_flags, "-o", BINARY, SOURCE]
            failed, binary, r = compile_program(
                s, argv, BINARY, timeout_s=timeout, memory_mb=self._settings.compile_memory_mb
            )
        if failed is not None:
            return failed
        assert binary is not None
        return StageOutput.next({"binary": encode_binary(binary), "compile_s": f"{r.wall_s:.3f}"})


class RunHandler:
    """Runs the compiled ``binary`` once per test case."""

    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        self._sandbox = sandbox
        self._settings = settings or judge_settings()

    def ready(self) -> tuple[bool, str]:
        return True, ""

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload, self._settings)
        except InvalidPayload as e:
            return e.output()
        encoded = inp.artifacts.get("binary")
        if not encoded:
            # The compile stage always sends one: a missing artifact is the pipeline's fault.
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error="no 'binary' artifact from compile")
        binary = decode_binary(encoded)
        sandbox = self._sandbox or shared_sandbox()
        limits = case_limits(p, self._settings, Limits())
        with sandbox.session() as s:
            s.write_file(BINARY, binary, executable=True)
            v = run_tests(s, ["./" + BINARY], p, limits, stage_budget(inp))
        return verdict_output(v, p, sandbox.isolation)


register("cpp", "compile")(CompileHandler)
register("cpp", "run")(RunHandler)
