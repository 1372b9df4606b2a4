"""The compile stage compiles a program once per worker: a repeat is served from its cache."""

from __future__ import annotations

import base64
from typing import Any

from distrs.core.model import Status
from distrs.rewards import cpp
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.compile_cache import CompileCache, cache_key
from distrs.rewards.judge import JudgeSettings
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
