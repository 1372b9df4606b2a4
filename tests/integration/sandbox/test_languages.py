"""Every language of languages.yaml through the generic judged handler in the real jail:
hello world, a stdin case, a source that does not compile, and a time-out. A language whose
runtime is not installed on this host is skipped, saying which executable is missing. The same
without /proc (the default, non-root worker pod): every language but C# (Mono) runs there."""

from __future__ import annotations

from typing import Any

import pytest

from distrs.core.languages import generic_languages, language_table
from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.language_handler import JAIL_PATH, LanguageRunHandler, runtime_installed
from distrs.sandbox.local import LocalSandbox
from tests.integration.sandbox.language_programs import PROGRAMS

LANGS = sorted(generic_languages())
SETTINGS = JudgeSettings(compile_time_s=60, test_time_s=10)


def handler(name: str, sb: LocalSandbox) -> LanguageRunHandler:
    spec = generic_languages()[name]
    if not runtime_installed(spec, ""):
        pytest.skip(f"{name}: runtime {spec.runtime!r} is not installed on this host (in {JAIL_PATH})")
    return LanguageRunHandler(name, spec, sandbox=sb, settings=SETTINGS)


def judge(h: LanguageRunHandler, code: str, tests: list[dict[str, str]], **extra: Any) -> StageOutput:
    payload = {"code": code, "tests": tests, "compare": "tokens", **extra}
    return h.run(StageInput("r", "t", h.name, "run", payload, timeout_s=120))


def test_every_language_has_programs_and_the_table_ships_them() -> None:
    shipped = set(language_table())
    assert {"python", "cpp", "c", "java", "go", "rust", "nodejs", "typescript", "bash", "pytest"} <= shipped
    assert {"php", "ruby", "lua", "perl", "R", "scala", "kotlin", "csharp", "D", "racket"} <= shipped
    assert set(LANGS) == set(PROGRAMS)


@pytest.mark.parametrize("name", LANGS)
def test_hello_and_stdin(name: str, bwrap_sandbox: LocalSandbox) -> None:
    h = handler(name, bwrap_sandbox)
    progs = PROGRAMS[name]
    if name == "pytest":  # a pytest file passes or fails; there is no stdout to compare
        out = judge(h, progs["hello"], [{"stdin": "", "expected_stdout": ""}], compare="exact", mode="raw")
        assert out.detail["run"]["return_code"] == 0 and "1 passed" in out.detail["run"]["stdout"], out.detail
        bad = judge(
            h, "def test_no():\n    assert 1 == 2\n", [{"stdin": "", "expected_stdout": ""}], mode="raw"
        )
        assert bad.detail["run"]["return_code"] != 0
        return
    out = judge(h, progs["hello"], [{"stdin": "", "expected_stdout": "hello"}])
    assert out.status is Status.OK and out.score == 1.0, out.detail
    cases = [{"stdin": "21\n", "expected_stdout": "42"}, {"stdin": "5\n", "expected_stdout": "11"}]
    out = judge(h, progs["stdin"], cases)
    assert out.status is Status.WRONG_ANSWER and out.score == 0.5, out.detail


@pytest.mark.parametrize("name", LANGS)
def test_source_that_does_not_compile(name: str, bwrap_sandbox: LocalSandbox) -> None:
    h = handler(name, bwrap_sandbox)
    out = judge(h, PROGRAMS[name]["broken"], [{"stdin": "", "expected_stdout": "x"}])
    if generic_languages()[name].compile is not None:
        assert out.status is Status.COMPILE_ERROR and out.detail["compiler_output"], out.detail
    else:  # an interpreter refuses it when it runs
        assert out.status is Status.RUNTIME_ERROR, out.detail
    assert out.score == 0.0


@pytest.mark.parametrize("name", LANGS)
def test_time_out(name: str, bwrap_sandbox: LocalSandbox) -> None:
    h = handler(name, bwrap_sandbox)
    out = judge(h, PROGRAMS[name]["loop"], [{"stdin": "", "expected_stdout": "x"}], time_limit_s=1.0)
    if name == "pytest":
        assert out.status is Status.TIMEOUT, out.detail
        return
    assert out.status is Status.TIMEOUT and out.score == 0.0, out.detail


# Mono checks that /proc/self/maps exists and reads its main thread's stack bounds from it
# (glibc's pthread_getattr_np); no static file can stand in for that (docs/sandbox.md, "/proc").
NEEDS_PROC = {n for n, spec in generic_languages().items() if spec.needs_proc}


def test_only_csharp_needs_proc() -> None:
    assert {"csharp"} == NEEDS_PROC


@pytest.mark.parametrize("name", sorted(set(LANGS) - NEEDS_PROC - {"pytest"}))
def test_hello_and_stdin_without_proc(name: str, noproc_sandbox: LocalSandbox) -> None:
    h = handler(name, noproc_sandbox)
    progs = PROGRAMS[name]
    out = judge(h, progs["hello"], [{"stdin": "", "expected_stdout": "hello"}])
    assert out.status is Status.OK and out.score == 1.0, out.detail
    cases = [{"stdin": "21\n", "expected_stdout": "42"}, {"stdin": "5\n", "expected_stdout": "10"}]
    out = judge(h, progs["stdin"], cases)
    assert out.status is Status.OK and out.score == 1.0, out.detail


@pytest.mark.parametrize("name", sorted(NEEDS_PROC))
def test_languages_that_need_proc_fail_clearly_without_it(name: str, noproc_sandbox: LocalSandbox) -> None:
    """Not a compile error for a correct program (a score the model did not earn): the service's
    own failure, naming what is missing and the mode that has it."""
    h = handler(name, noproc_sandbox)
    out = judge(h, PROGRAMS[name]["hello"], [{"stdin": "", "expected_stdout": "hello"}])
    assert out.status is Status.INTERNAL_ERROR and out.score == 0.0
    assert "needs /proc" in out.detail["error"] and "userNamespace" in out.detail["error"], out.detail


@pytest.mark.parametrize("name", sorted(NEEDS_PROC))
def test_languages_that_need_proc_run_where_the_jail_has_one(name: str, bwrap_sandbox: LocalSandbox) -> None:
    h = handler(name, bwrap_sandbox)
    out = judge(h, PROGRAMS[name]["hello"], [{"stdin": "", "expected_stdout": "hello"}])
    assert out.status is Status.OK, out.detail
