"""The skeleton every judged stage handler (``cpp``, ``python``, ``cuda``, the languages) shares.

:class:`JudgedHandler` holds the sandbox (the worker's shared one unless given), the
``DISTRS_JUDGE_*`` settings and what the worker's image answers once (the interpreter they name,
compiler identities, the C++ precompiled header), is ready by default, and turns a malformed
payload into an ``invalid`` result before the stage's own :meth:`JudgedHandler.judge` sees it.

:class:`CompileHandler` is the ``compile`` stage of the compiled types: it writes ``code`` to
the type's source file, runs the type's compiler in the sandbox and ships the binary to the
next stage as the ``binary`` artifact (with ``compile_s``); a compiler failure ends the request.
A type only says which source file and compiler command (plus, if needed, memory and
environment) it uses.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from distrs import sandbox as sandboxes
from distrs.core.model import Status
from distrs.rewards.base import (
    InvalidPayload,
    MiB,
    StageInput,
    StageOutput,
    decode_binary,
    encode_binary,
    stage_budget,
)
from distrs.rewards.checker import parse_checker, prepare_checker
from distrs.rewards.compile_cache import CompileCache, ToolIdentities, cache_key
from distrs.rewards.cxx_pch import JudgePch, PchUse
from distrs.rewards.interpreter import Interpreter
from distrs.rewards.judge.cases import CaseResult, write_inputs
from distrs.rewards.judge.compiler import compile_program
from distrs.rewards.judge.limits import LIMITS_CUT_ARTIFACT, limit_cuts
from distrs.rewards.judge.payload import JudgedPayload, parse_payload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Mounts, Sandbox, merge_mounts
from distrs.sandbox.base import default_env

BINARY = "prog"
JAIL_PATH = default_env()["PATH"]  # where programs are found inside the jail
CheckFn = Callable[..., CaseResult]
BINARY_ARTIFACT = "binary"


class JudgedHandler(ABC):
    """Sandbox, settings, readiness and payload validation of one judged stage."""

    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        self._sandbox = sandbox
        self._settings = settings or JudgeSettings()
        self.python = Interpreter(self._settings.python)
        self.tools = ToolIdentities()
        self.cxx_pch = JudgePch(self._settings)  # C++ checkers' (and cpp's) precompiled header

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox given at construction, else the worker's shared one (created on first use)."""
        return self._sandbox or sandboxes.shared()

    def ready(self) -> tuple[bool, str]:
        """Not ready while this process cannot build a safe jail (unless given a sandbox)."""
        return (True, "") if self._sandbox is not None else sandboxes.readiness()

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload, self._settings)
            return self.judge(inp, p)
        except InvalidPayload as e:
            return e.output()

    def special_judge(self, inp: StageInput, p: JudgedPayload) -> CheckFn | None:
        """The payload's checker, prepared (compiled) for this request; None without one."""
        spec = parse_checker(inp.payload)
        if spec is None:
            return None
        return prepare_checker(self.sandbox, spec, p, self._settings, self.python.get(), self.cxx_pch).check

    @abstractmethod
    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        """The stage's work on a valid payload."""


def binary_artifact(inp: StageInput) -> bytes | StageOutput:
    """The compiled program from the compile stage, or the ``internal_error`` ending the request.

    The compile stage always sends one: a missing artifact is the pipeline's fault, not the model's.
    """
    encoded = inp.artifacts.get(BINARY_ARTIFACT)
    if not encoded:
        return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error="no 'binary' artifact from compile")
    return decode_binary(encoded)


class CompileHandler(JudgedHandler):
    """Compiler → artifact ``binary``; compile errors end the request ``compile_error``.

    Outcomes are kept in a per-handler :class:`CompileCache` (``DISTRS_JUDGE_COMPILE_CACHE_MB``),
    so the same program sent once per test case compiles once on this worker.
    """

    source: ClassVar[str]  # the file ``code`` is written to, e.g. ``main.cpp``

    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        super().__init__(sandbox, settings)
        self._cache = CompileCache(self._settings.compile_cache_mb * MiB)

    @abstractmethod
    def compiler(self) -> list[str]:
        """Compiler and flags (from the settings, never from the payload); output and source follow."""

    def memory_mb(self) -> int:
        return self._settings.compile_memory_mb

    def env(self) -> dict[str, str] | None:
        return None

    def pch(self) -> PchUse | None:
        """The precompiled header this compile may use (include flags and their bind), if any."""
        return None

    def tool_mounts(self) -> Mounts | None:
        """Host paths the compiler needs in the jail beyond its ``/usr`` (a toolkit elsewhere)."""
        return None

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        timeout = min(self._settings.compile_time_s, p.compile_time_limit_s or math.inf, stage_budget(inp))
        argv = [*self.compiler(), "-o", BINARY, self.source]
        # keyed without the precompiled header: it changes how fast, never what, g++ compiles
        key = cache_key([inp.reward_type, self.tools(argv[0], JAIL_PATH), *argv], p.code, p.files)
        pch = self.pch()
        if pch is not None:
            argv[-3:-3] = pch.args
        cut = limit_cuts(p, self._settings, inp.stage, inp.timeout_s, compiles=True, runs=False)
        cut_artifact = {LIMITS_CUT_ARTIFACT: json.dumps(cut["limits_cut"])} if cut else {}
        cached = self._cache.get(key)
        if isinstance(cached, StageOutput):
            if cached.outcome == "next":
                return StageOutput.next({**cached.artifacts, "compile_cached": "1", **cut_artifact})
            return StageOutput.final(
                cached.status or Status.COMPILE_ERROR, 0.0, **cached.detail, compile_cached=True, **cut
            )
        with self.sandbox.session() as s:
            write_inputs(s, p)  # headers and the like the source may include
            s.write_file(self.source, p.code.encode())
            failed, binary, r = compile_program(
                s,
                argv,
                BINARY,
                timeout_s=timeout,
                memory_mb=self.memory_mb(),
                env=self.env(),
                mounts=merge_mounts(pch.mounts if pch else None, self.tool_mounts()),
            )
        if failed is not None:
            if failed.status is Status.COMPILE_ERROR:
                self._cache.put(key, failed)
            return replace(failed, detail={**failed.detail, **cut}) if cut else failed
        assert binary is not None
        out = StageOutput.next({BINARY_ARTIFACT: encode_binary(binary), "compile_s": f"{r.wall_s:.3f}"})
        self._cache.put(key, out)  # cached without this request's cuts
        return StageOutput.next({**out.artifacts, **cut_artifact}) if cut_artifact else out
