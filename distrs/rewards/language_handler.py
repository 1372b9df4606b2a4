"""The ``run`` stage of every language in ``languages.yaml`` without a built-in reward type.

One sandbox session per request: the payload's ``files`` and the source are written, the
language's compile command runs once (a failure is ``compile_error``, an overrun ``timeout`` with
``stage: compile``), then its run command runs once per test case through the same
:func:`run_tests` as the built-in types, with the same payload, limits, comparison and scoring.
Compiling in the run session keeps every language to one stage (and one artifact-free hop);
``cpp``, whose binaries are worth shipping to another worker, keeps its own two stages. A
compile cache per handler makes the same program, sent once per test case, compile once.

A language whose runtime is not installed on this worker is not registered here
(:func:`installed_languages`), so it cannot make a worker report itself not ready; a request
for it reaching such a worker ends ``internal_error`` ("no handler"). The handlers the registry
makes share one settings object and one compile cache (:func:`language_handlers`).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import stat

from distrs.core.languages import LanguageSpec, generic_languages
from distrs.core.model import Status
from distrs.rewards.base import MiB, StageInput, StageOutput, snippet, stage_budget
from distrs.rewards.compile_cache import CompileCache, CompiledFiles, cache_key
from distrs.rewards.judge.cases import fetch_outputs, run_tests, verdict_output, write_inputs
from distrs.rewards.judge.handler import JAIL_PATH, JudgedHandler
from distrs.rewards.judge.limits import case_limits, limit_cuts
from distrs.rewards.judge.payload import JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits, MemoryKind, Mounts, Session
from distrs.sandbox.jail import JAIL_WORKDIR


def _expand(argv: tuple[str, ...], python: str) -> list[str]:
    return [a.replace("{python}", python).replace("{workdir}", JAIL_WORKDIR) for a in argv]


# Programs are looked up in the jail's PATH (JAIL_PATH): a runtime elsewhere on the host (say
# under /root) is invisible inside.
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
    """Compile (if the language has a compile step) and run the tests of one language.

    Compile outcomes are kept in ``cache``, one for every language of a worker
    (``DISTRS_JUDGE_COMPILE_CACHE_MB``; a handler of its own without one), keyed like ``cpp``'s by language, compiler identity and
    command, source and input files: the same program sent once per test case compiles once on
    this worker. A successful compile is cached as the top-level files it left in the work dir
    (replayed into the next session's work dir); one that made anything else there (a
    directory, a symlink, a file too big to read back) is not cached, so a cached run never
    differs from a compiled one.
    """

    def __init__(
        self, name: str, spec: LanguageSpec, *, cache: CompileCache | None = None, **kwargs: object
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.name = name
        self.spec = spec
        self._cache = cache or CompileCache(self._settings.compile_cache_mb * MiB)
        self.compiles = 0  # compiler runs of this handler (cache hits do not count)
        self._has_proc: bool | None = None

    def ready(self) -> tuple[bool, str]:
        if not runtime_installed(self.spec, self._settings.python):
            return False, f"{self.name}: runtime {self.spec.runtime!r} not installed"
        return True, ""

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        exe, base_mounts = self.python.get()
        spec = self.spec
        mounts = Mounts(ro_paths=(*base_mounts.ro_paths, *spec.mounts), self_exe=self_exe(spec))
        env = {k: v.replace("{workdir}", JAIL_WORKDIR) for k, v in spec.env.items()}
        kind = MemoryKind.DATA if spec.memory == "data" else MemoryKind.AS
        budget = stage_budget(inp)
        sandbox = self.sandbox
        check = self.special_judge(inp, p)
        extra: dict[str, object] = {}
        with sandbox.session() as s:
            if spec.needs_proc and not self._jail_has_proc(s):
                return StageOutput.final(
                    Status.INTERNAL_ERROR,
                    0.0,
                    error=f"{self.name} needs /proc, which this worker's jails do not have "
                    "(sandbox.mode=userNamespace gives them one; docs/sandbox.md)",
                )
            write_inputs(s, p)
            s.write_file(spec.file, p.code.encode())
            if spec.compile:
                argv = _expand(spec.compile, exe)
                key = cache_key([self.name, self.tools(argv[0], JAIL_PATH), *argv], p.code, p.files)
                cached = self._cache.get(key)
                if isinstance(cached, StageOutput):  # the compiler's refusal, as it was
                    return StageOutput.final(
                        cached.status or Status.COMPILE_ERROR, 0.0, **cached.detail, compile_cached=True
                    )
                if isinstance(cached, CompiledFiles):
                    for name, data, executable in cached.files:
                        s.write_file(name, data, executable=executable)
                    extra["compile_cached"] = True
                else:
                    timeout = min(self._settings.compile_time_s, p.compile_time_limit_s or math.inf, budget)
                    failed, wall_s = self._compile(s, key, argv, timeout, env, mounts, kind)
                    if failed is not None:
                        return failed
                    budget = max(0.5, budget - wall_s)
            limits = case_limits(p, self._settings, Limits(memory_kind=kind, nproc=256, nofile=1024))
            v = run_tests(s, _expand(spec.run, exe), p, limits, budget, env=env, mounts=mounts, check=check)
            files = fetch_outputs(s, p)
        extra.update(limit_cuts(p, self._settings, inp.stage, inp.timeout_s, compiles=bool(spec.compile)))
        return verdict_output(v, p, sandbox.isolation, files, language=self.name, **extra)

    def _jail_has_proc(self, s: Session) -> bool:
        """Whether this worker's jails mount a /proc (asked once: the sandbox does not change)."""
        if self._has_proc is None:
            r = s.run(["sh", "-c", "test -r /proc/self/maps"], limits=Limits(wall_s=10))
            self._has_proc = r.ok
        return self._has_proc

    def _compile(
        self,
        s: Session,
        key: str,
        argv: list[str],
        timeout: float,
        env: dict[str, str],
        mounts: Mounts,
        kind: MemoryKind,
    ) -> tuple[StageOutput | None, float]:
        """Run the compiler: (the final result when it failed, else None; its wall time). The
        outcome goes into the cache unless it timed out or left files that cannot be replayed."""
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
        self.compiles += 1
        r = s.run(argv, limits=limits, env=env, mounts=mounts)
        compiler_output = snippet(r.stderr + r.stdout, 8000)
        if r.timed_out:
            return StageOutput.final(
                Status.TIMEOUT, 0.0, stage="compile", reason=r.describe(), compiler_output=compiler_output
            ), r.wall_s
        if not r.ok:
            failed = StageOutput.final(
                Status.COMPILE_ERROR, 0.0, reason=r.describe(), compiler_output=compiler_output
            )
            self._cache.put(key, failed)
            return failed, r.wall_s
        compiled = self._compiled_files(s, env)
        if compiled is not None:
            self._cache.put(key, compiled)
        return None, r.wall_s

    def _compiled_files(self, s: Session, env: dict[str, str]) -> CompiledFiles | None:
        """Every top-level regular file of the work dir but the source (input files included, as
        the compiler left them); None when something else is there. The language's own build
        caches under the work dir (``env`` values such as ``GOCACHE``) are not needed to run."""
        skip = {self.spec.file}
        skip |= {
            v[len(JAIL_WORKDIR) + 1 :].split("/")[0] for v in env.values() if v.startswith(JAIL_WORKDIR + "/")
        }
        files = []
        for entry in os.scandir(s.path):
            if entry.name in skip:
                continue
            data = s.read_file(entry.name, self._settings.compile_cache_mb * MiB)
            if data is None:  # a directory, a symlink, something too big: compile every time
                return None
            executable = bool(entry.stat(follow_symlinks=False).st_mode & stat.S_IXUSR)
            files.append((entry.name, data, executable))
        return CompiledFiles(tuple(sorted(files)))


def language_handlers() -> dict[str, functools.partial[LanguageRunHandler]]:
    """Reward type -> handler factory for every installed generic language: one settings object
    (``DISTRS_JUDGE_*``) and one compile cache for all of them (one memory bound rather than one
    per language; keys name the language, so sharing never mixes them up)."""
    settings = JudgeSettings()
    cache = CompileCache(settings.compile_cache_mb * MiB)
    return {
        name: functools.partial(LanguageRunHandler, name, spec, cache=cache, settings=settings)
        for name, spec in installed_languages(settings.python).items()
    }
