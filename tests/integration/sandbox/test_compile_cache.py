"""A program compiles once per worker: a repeat is served from the compile cache, for ``cpp``'s
compile stage and for the generic languages of languages.yaml alike."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from distrs.core.languages import LanguageSpec, generic_languages
from distrs.core.model import Status
from distrs.rewards import cpp
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.compile_cache import CompileCache, cache_key
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.language_handler import LanguageRunHandler, runtime_installed
from distrs.sandbox.local import LocalSandbox

GOOD = '#include <cstdio>\nint main(){int x; scanf("%d", &x); printf("%d\\n", 2 * x);}'


def compile_once(h: cpp.CompileHandler, code: str, **extra: Any) -> StageOutput:
    payload = {"code": code, "tests": [{"stdin": "1", "expected_stdout": "2"}], **extra}
    return h.run(StageInput("r", "t", "cpp", "compile", payload, timeout_s=60))


def test_same_program_compiles_once(bwrap_sandbox: LocalSandbox) -> None:
    h = cpp.CompileHandler(bwrap_sandbox, JudgeSettings())
    first = compile_once(h, GOOD)
    assert first.outcome == "next" and "compile_cached" not in first.artifacts
    second = compile_once(h, GOOD)
    assert second.outcome == "next" and second.artifacts["compile_cached"] == "1"
    assert second.artifacts["binary"] == first.artifacts["binary"]
    other = compile_once(h, GOOD + "\n// changed")
    assert "compile_cached" not in other.artifacts  # another source is another key
    header = {"files": {"h.h": base64.b64encode(b"#define X 1\n").decode()}}
    assert "compile_cached" not in compile_once(h, GOOD, **header).artifacts  # files are in the key


def test_compile_errors_are_cached_too(bwrap_sandbox: LocalSandbox) -> None:
    h = cpp.CompileHandler(bwrap_sandbox, JudgeSettings())
    a = compile_once(h, "int main(){ return y; }")
    b = compile_once(h, "int main(){ return y; }")
    assert a.status is b.status is Status.COMPILE_ERROR
    assert b.detail["compile_cached"] is True and b.detail["compiler_output"] == a.detail["compiler_output"]


def test_cache_is_bounded_least_recently_used_first() -> None:
    c = CompileCache(max_bytes=250)
    out = [StageOutput.next({"binary": "x" * 100}) for _ in range(3)]
    keys = [cache_key(["g++"], f"src{i}", []) for i in range(3)]
    c.put(keys[0], out[0])
    c.put(keys[1], out[1])
    assert c.get(keys[0]) is out[0]  # 0 is now the most recent
    c.put(keys[2], out[2])
    assert c.get(keys[1]) is None and c.get(keys[0]) is out[0] and c.get(keys[2]) is out[2]
    assert CompileCache(max_bytes=0).get(keys[0]) is None


# The generic languages (languages.yaml) compile inside their one `run` stage; the handler keeps
# what the compiler left in the work dir and replays it into the next session.
C_PROG = '#include <stdio.h>\nint main(void){int n; scanf("%d", &n); printf("%d\\n", 2 * n); return 0;}'
CASES = [{"stdin": "21\n", "expected_stdout": "42"}, {"stdin": "5\n", "expected_stdout": "10"}]


def language(
    name: str, sb: LocalSandbox, spec: LanguageSpec | None = None, cache: CompileCache | None = None
) -> LanguageRunHandler:
    """A handler with a cache of its own (unless given one), so earlier tests cannot warm it."""
    spec = spec or generic_languages()[name]
    if not runtime_installed(spec, ""):
        pytest.skip(f"{name}: runtime {spec.runtime!r} is not installed on this host")
    cache = cache or CompileCache(256 << 20)
    return LanguageRunHandler(name, spec, cache=cache, sandbox=sb, settings=JudgeSettings())


def run_once(
    h: LanguageRunHandler, code: str, tests: list[dict[str, str]] = CASES, **extra: Any
) -> StageOutput:
    payload = {"code": code, "tests": tests, "compare": "tokens", **extra}
    return h.run(StageInput("r", "t", h.name, "run", payload, timeout_s=120))


def test_generic_language_compiles_the_same_program_once(bwrap_sandbox: LocalSandbox) -> None:
    h = language("c", bwrap_sandbox)
    first = run_once(h, C_PROG)
    assert first.status is Status.OK and "compile_cached" not in first.detail and h.compiles == 1
    second = run_once(h, C_PROG)  # the next test case of the same program, as verl sends it
    assert second.status is Status.OK and second.detail["compile_cached"] is True and h.compiles == 1
    assert second.detail["tests"][0]["status"] == "ok" and second.score == first.score == 1.0
    # another source, or the same source with other input files, is another compilation
    assert run_once(h, C_PROG + "\n/* changed */").status is Status.OK and h.compiles == 2
    header = {"files": {"h.h": base64.b64encode(b"#define X 1\n").decode()}}
    assert run_once(h, C_PROG, **header).status is Status.OK and h.compiles == 3
    assert run_once(h, C_PROG, **header).detail["compile_cached"] is True and h.compiles == 3


def test_generic_language_caches_compile_errors_with_the_compiler_output(bwrap_sandbox: LocalSandbox) -> None:
    h = language("c", bwrap_sandbox)
    a = run_once(h, "int main(void){ return y; }")
    b = run_once(h, "int main(void){ return y; }")
    assert a.status is b.status is Status.COMPILE_ERROR and h.compiles == 1
    assert b.detail["compile_cached"] is True and b.detail["compiler_output"] == a.detail["compiler_output"]


def test_another_language_compiles_the_same_source_again(bwrap_sandbox: LocalSandbox) -> None:
    both = "int main() { return 0; }\n"  # valid C and valid D
    shared = CompileCache(256 << 20)  # as in a worker: one cache for every language
    c, d = language("c", bwrap_sandbox, cache=shared), language("D", bwrap_sandbox, cache=shared)
    tests = [{"stdin": "", "expected_stdout": ""}]
    assert run_once(c, both, tests).status is Status.OK and c.compiles == 1
    assert run_once(d, both, tests).status is Status.OK and d.compiles == 1
    assert run_once(d, both, tests).detail["compile_cached"] is True and d.compiles == 1


def test_every_class_file_of_a_java_program_is_replayed(bwrap_sandbox: LocalSandbox) -> None:
    h = language("java", bwrap_sandbox)
    code = (
        "import java.util.*;\nclass Twice { static int of(int n) { return 2 * n; } }\n"
        "public class Main { public static void main(String[] a) {"
        " System.out.println(Twice.of(new Scanner(System.in).nextInt())); } }"
    )
    assert run_once(h, code).status is Status.OK and h.compiles == 1
    again = run_once(h, code)  # Main.class and Twice.class both come back from the cache
    assert again.status is Status.OK and again.detail["compile_cached"] is True and h.compiles == 1


def test_go_build_cache_in_the_work_dir_does_not_stop_caching(bwrap_sandbox: LocalSandbox) -> None:
    h = language("go", bwrap_sandbox)
    code = 'package main\nimport "fmt"\nfunc main() { var n int; fmt.Scan(&n); fmt.Println(2 * n) }'
    assert run_once(h, code).status is Status.OK
    assert run_once(h, code).detail["compile_cached"] is True and h.compiles == 1


SH_COMPILER = LanguageSpec(
    file="main.sh",
    compile=("sh", "-c", "cp main.sh prog && chmod +x prog"),
    run=("./prog",),
    runtime="sh",
)


def test_replayed_files_keep_their_executable_bit(bwrap_sandbox: LocalSandbox) -> None:
    h = language("sh-compiled", bwrap_sandbox, SH_COMPILER)
    tests = [{"stdin": "", "expected_stdout": "hi"}]
    assert run_once(h, "#!/bin/sh\necho hi\n", tests).status is Status.OK
    again = run_once(h, "#!/bin/sh\necho hi\n", tests)
    assert again.status is Status.OK and again.detail["compile_cached"] is True and h.compiles == 1


def test_a_compile_that_leaves_a_directory_is_not_cached(bwrap_sandbox: LocalSandbox) -> None:
    spec = SH_COMPILER.model_copy(
        update={"compile": ("sh", "-c", "mkdir out && cp main.sh prog && chmod +x prog")}
    )
    h = language("sh-compiled", bwrap_sandbox, spec)
    tests = [{"stdin": "", "expected_stdout": "hi"}]
    for _ in range(2):
        out = run_once(h, "#!/bin/sh\necho hi\n", tests)
        assert out.status is Status.OK and "compile_cached" not in out.detail
    assert h.compiles == 2  # the directory cannot be replayed: compiled every time
