"""The ``run`` stage of every language in ``languages.yaml`` without a built-in reward type.

One sandbox session per request: the payload's ``files`` and the source are written, the
language's compile command runs once (a failure is ``compile_error``, an overrun ``timeout`` with
``stage: compile``), then its run command runs once per test case through the same
:func:`run_tests` as the built-in types, with the same payload, limits, comparison and scoring.
Compiling in the run session keeps every language to one stage (and one artifact-free hop);
``cpp``, whose binaries are worth shipping to another worker, keeps its own two stages.

A language whose runtime is not installed on this worker is not registered here
(:func:`installed_languages`), so it cannot make a worker report itself not ready; a request
for it reaching such a worker ends ``internal_error`` ("no handler").
"""

from __future__ import annotations

import functools
import math
import os
import shutil

from distrs.core.languages import LanguageSpec, generic_languages
from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.interpreter import interpreter
from distrs.rewards.judge import (
    JudgedPayload,
    MiB,
    case_limits,
    fetch_outputs,
    run_tests,
    snippet,
    stage_budget,
    verdict_output,
    write_inputs,
)
from distrs.rewards.judged_handler import JudgedHandler
from distrs.sandbox import Limits, MemoryKind, Mounts
from distrs.sandbox.jail import JAIL_WORKDIR


def _expand(argv: tuple[str, ...], python: str) -> list[str]:
    return [a.replace("{python}", python).replace("{workdir}", JAIL_WORKDIR) for a in argv]


# Where the jail finds programs (distrs.sandbox.base.default_env): a runtime elsewhere on the
# host (say under /root) is invisible inside.
JAIL_PATH = "/usr/local/bin:/usr/bin:/bin"


def self_exe(spec: LanguageSpec) -> str | None:
    """The real path of the language's ``self_exe`` (what ``/proc/self/exe`` would name for it),
    or None when it has none or it is not installed."""
    if spec.self_exe is None:
        return None
    found = shutil.which(spec.self_exe, path=JAIL_PATH)
    return os.path.realpath(found) if found is not None else None


def runtime_installed(spec: LanguageSpec, python: str) -> bool:
    if spec.runtime == "{python}":
        return True  # the worker's interpreter, bound into the jail by interpreter()
    return shutil.which(spec.runtime, path=JAIL_PATH) is not None


def installed_languages(python: str = "") -> dict[str, LanguageSpec]:
    """The generic languages whose runtime executable exists on this machine."""
    return {name: spec for name, spec in generic_languages().items() if runtime_installed(spec, python)}


class LanguageRunHandler(JudgedHandler):
    """Compile (if the language has a compile step) and run the tests of one language."""

    def __init__(self, name: str, spec: LanguageSpec, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.name = name
        self.spec = spec

    def ready(self) -> tuple[bool, str]:
        if not runtime_installed(self.spec, self._settings.python):
            return False, f"{self.name}: runtime {self.spec.runtime!r} not installed"
        return True, ""

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        exe, base_mounts = interpreter(self._settings.python)
        spec = self.spec
        mounts = Mounts(ro_paths=(*base_mounts.ro_paths, *spec.mounts), self_exe=self_exe(spec))
        env = {k: v.replace("{workdir}", JAIL_WORKDIR) for k, v in spec.env.items()}
        kind = MemoryKind.DATA if spec.memory == "data" else MemoryKind.AS
        budget = stage_budget(inp)
        sandbox = self.sandbox
        check = self.special_judge(inp, p)
        with sandbox.session() as s:
            write_inputs(s, p)
            s.write_file(spec.file, p.code.encode())
            if spec.compile:
                timeout = min(self._settings.compile_time_s, p.compile_time_limit_s or math.inf, budget)
                limits = Limits(
                    wall_s=timeout,
                    cpu_s=timeout,
                    memory_bytes=self._settings.compile_memory_mb * MiB,
                    memory_kind=kind,
                    nproc=256,
                    fsize_bytes=256 * MiB,
                    nofile=1024,
                    output_bytes=256 * 1024,
                    tmpfs_bytes=256 * MiB,
                )
                r = s.run(_expand(spec.compile, exe), limits=limits, env=env, mounts=mounts)
                compiler_output = snippet(r.stderr + r.stdout, 8000)
                if r.timed_out:
                    return StageOutput.final(
                        Status.TIMEOUT,
                        0.0,
                        stage="compile",
                        reason=r.describe(),
                        compiler_output=compiler_output,
                    )
                if not r.ok:
                    return StageOutput.final(
                        Status.COMPILE_ERROR, 0.0, reason=r.describe(), compiler_output=compiler_output
                    )
                budget = max(0.5, budget - r.wall_s)
            limits = case_limits(p, self._settings, Limits(memory_kind=kind, nproc=256, nofile=1024))
            v = run_tests(s, _expand(spec.run, exe), p, limits, budget, env=env, mounts=mounts, check=check)
            files = fetch_outputs(s, p)
        return verdict_output(v, p, sandbox.isolation, files, language=self.name)


@functools.cache
def language_handlers() -> dict[str, functools.partial[LanguageRunHandler]]:
    """Reward type -> handler factory for every installed generic language."""
    return {
        name: functools.partial(LanguageRunHandler, name, spec)
        for name, spec in installed_languages().items()
    }
