"""A judged program's payload, validated: the program, its test cases, how outputs compare.

Fields (DESIGN.md "Command line"): ``code``, ``tests`` (or ``asserts``), ``compare``,
``float_tol``, ``scoring``, ``reference_time_s``; plus optional ``time_limit_s`` and
``memory_limit_mb`` (which may lower the default and raise it up to ``DISTRS_JUDGE_MAX_MEMORY_MB``),
``files`` (relative file path -> base64 content, written into the work dir with its
directories), ``fetch_files`` (paths read back after the run into ``detail.files``, base64;
relative to the work dir, or absolute as the program sees them), ``fn_name`` (call-based tests),
``compile_time_limit_s``, ``timed_runs`` (``cuda``: timed re-runs per passed case, 0 to
``MAX_TIMED_RUNS``; ``judge/timing.py``) and ``mode: "raw"`` to also get the first case's run in
``detail.run``.
Every refusal is an :class:`~distrs.rewards.base.InvalidPayload` naming the first bad field.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distrs.rewards.base import InvalidPayload, MiB
from distrs.rewards.compare import DEFAULT_FLOAT_TOL, Compare
from distrs.rewards.judge.settings import JudgeSettings


@dataclass(frozen=True)
class Case:
    stdin: str
    expected_stdout: str
    check_output: bool = True  # False: the case passes when the program exits 0 (assert tests)


@dataclass(frozen=True)
class JudgedPayload:
    code: str
    tests: tuple[Case, ...]
    compare: Compare = Compare.TOKENS
    float_tol: float = DEFAULT_FLOAT_TOL
    scoring: str = "fraction"
    reference_time_s: float | None = None
    time_limit_s: float | None = None
    memory_limit_mb: int | None = None
    speedup_cap: float = 2.0
    mode: str = "judge"  # "raw": also report the first case's full run (SandboxFusion /run_code)
    files: tuple[tuple[str, bytes], ...] = ()
    fetch_files: tuple[str, ...] = ()
    compile_time_limit_s: float | None = None  # lowers the compile limit (SandboxFusion compile_timeout)
    fn_name: str | None = None  # call-based tests (python): stdin = JSON args, stdout = JSON result
    asserts: bool = False  # assert tests: each case's stdin is test code run after the solution
    timed_runs: int | None = None  # cuda: timed re-runs per passed case (None: the type's default)


def _num(payload: dict[str, Any], name: str, *, positive: bool = True) -> float | None:
    v = payload.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InvalidPayload(name, f"must be a finite number, got {v!r}")
    if positive and v <= 0:
        raise InvalidPayload(name, f"must be > 0, got {v!r}")
    if not positive and v < 0:
        raise InvalidPayload(name, f"must be >= 0, got {v!r}")
    return float(v)


MAX_FILES = 64
MAX_TIMED_RUNS = 10
MAX_FILES_BYTES = 8 * MiB
FETCH_FILE_BYTES = 1 * MiB
MAX_PATH_CHARS = 1024
MAX_PATH_DEPTH = 32
_BAD_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def check_file_path(name: Any, field: str, *, absolute: bool = False) -> str:
    """A path for ``files`` (``absolute=False``) or ``fetch_files`` (``absolute=True``), as
    SandboxFusion takes them: a relative path of plain components (``dir1/dir2/f``) meant inside
    the work dir, or for ``fetch_files`` also an absolute path as the program sees it. ``..``,
    ``.``, empty components, backslashes and control characters are refused (InvalidPayload
    naming the entry), so no entry can leave the work dir by its spelling; the sandbox session
    never follows a symlink either (``sandbox/workdir.py``)."""
    if not isinstance(name, str) or not name:
        raise InvalidPayload(field, f"{name!r} is not a file path")
    if len(name) > MAX_PATH_CHARS or _BAD_PATH_CHARS.search(name):
        raise InvalidPayload(
            field, f"{name[:80]!r}: at most {MAX_PATH_CHARS} characters, no control characters or backslashes"
        )
    rel = name
    if name.startswith("/"):
        if not absolute:
            raise InvalidPayload(field, f"{name!r} is an absolute path; give a path relative to the work dir")
        rel = name[1:]
    parts = rel.split("/")
    if len(parts) > MAX_PATH_DEPTH or any(p in ("", ".", "..") for p in parts):
        raise InvalidPayload(
            field,
            f"{name!r} is not a plain path: no '..', '.' or empty components, at most {MAX_PATH_DEPTH} deep",
        )
    return name


def check_file_name(name: Any, field: str) -> str:
    """A relative file path for the work dir (see :func:`check_file_path`)."""
    return check_file_path(name, field)


def _files(payload: dict[str, Any]) -> tuple[tuple[str, bytes], ...]:
    raw = payload.get("files") or {}
    if not isinstance(raw, dict):
        raise InvalidPayload("files", "must be an object {file path: base64 content}")
    if len(raw) > MAX_FILES:
        raise InvalidPayload("files", f"at most {MAX_FILES} files")
    out = []
    total = 0
    for name, content in raw.items():
        check_file_path(name, "files")
        if content is None:
            continue  # SandboxFusion skips files without content
        if not isinstance(content, str):
            raise InvalidPayload(f"files.{name}", "must be a base64 string")
        try:
            data = base64.b64decode(content.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise InvalidPayload(f"files.{name}", "is not valid base64") from None
        total += len(data)
        if total > MAX_FILES_BYTES:
            raise InvalidPayload("files", f"more than {MAX_FILES_BYTES} bytes in all")
        out.append((name, data))
    check_no_clash([n for n, _ in out])
    return tuple(out)


def check_no_clash(names: Sequence[str]) -> None:
    """No ``files`` entry may be a directory of another (``a`` and ``a/b``): one would have to
    replace the other."""
    dirs = {"/".join(n.split("/")[:i]) for n in names for i in range(1, n.count("/") + 1)}
    for n in names:
        if n in dirs:
            raise InvalidPayload("files", f"{n!r} is both a file and a directory of another entry")


def _fetch_files(payload: dict[str, Any]) -> tuple[str, ...]:
    raw = payload.get("fetch_files") or []
    if not isinstance(raw, list) or len(raw) > MAX_FILES:
        raise InvalidPayload("fetch_files", f"must be a list of at most {MAX_FILES} file paths")
    return tuple(check_file_path(n, "fetch_files", absolute=True) for n in raw)


def _timed_runs(payload: dict[str, Any]) -> int | None:
    v = payload.get("timed_runs")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TIMED_RUNS:
        raise InvalidPayload("timed_runs", f"must be an integer from 0 to {MAX_TIMED_RUNS}, got {v!r}")
    return v


def parse_payload(payload: Any, settings: JudgeSettings, *, need_tests: bool = True) -> JudgedPayload:
    """Validate a judged payload; InvalidPayload names the first bad field."""
    if not isinstance(payload, dict):
        raise InvalidPayload("payload", f"must be an object, got {type(payload).__name__}")
    code = payload.get("code")
    if not isinstance(code, str) or not code.strip():
        raise InvalidPayload("code", "must be a non-empty string")
    if len(code.encode()) > settings.max_code_bytes:
        raise InvalidPayload("code", f"longer than {settings.max_code_bytes} bytes")
    if "\x00" in code:
        raise InvalidPayload("code", "must not contain NUL bytes")
    raw_tests = payload.get("tests")
    raw_asserts = payload.get("asserts")
    if raw_asserts is not None:
        if raw_tests is not None:
            raise InvalidPayload("asserts", "give either tests or asserts, not both")
        if not isinstance(raw_asserts, list) or not all(isinstance(a, str) for a in raw_asserts):
            raise InvalidPayload("asserts", "must be a list of strings (test code, e.g. 'assert f(1) == 2')")
        raw_tests = [{"stdin": a, "expected_stdout": ""} for a in raw_asserts]
    if raw_tests is None and not need_tests:
        raw_tests = []
    if not isinstance(raw_tests, list):
        raise InvalidPayload("tests", "must be a list of {stdin, expected_stdout}")
    if need_tests and not raw_tests:
        raise InvalidPayload("tests", "must hold at least one test case")
    if len(raw_tests) > settings.max_tests:
        raise InvalidPayload("tests", f"at most {settings.max_tests} test cases, got {len(raw_tests)}")
    tests = []
    for i, t in enumerate(raw_tests):
        if not isinstance(t, dict):
            raise InvalidPayload(f"tests[{i}]", "must be an object {stdin, expected_stdout}")
        stdin = t.get("stdin", "")
        expected = t.get("expected_stdout")
        if not isinstance(stdin, str):
            raise InvalidPayload(f"tests[{i}].stdin", "must be a string")
        if not isinstance(expected, str):
            raise InvalidPayload(f"tests[{i}].expected_stdout", "must be a string")
        tests.append(Case(stdin, expected, check_output=raw_asserts is None))
    fn_name = payload.get("fn_name")
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise InvalidPayload("fn_name", f"must be a function name, got {fn_name!r}")
    try:
        compare = Compare(payload.get("compare") or (Compare.JSON if fn_name else Compare.TOKENS))
    except ValueError:
        known = ", ".join(c.value for c in Compare)
        raise InvalidPayload("compare", f"must be one of {known}; got {payload.get('compare')!r}") from None
    scoring = payload.get("scoring") or "fraction"
    if scoring not in ("fraction", "all"):
        raise InvalidPayload("scoring", f"must be 'fraction' or 'all', got {scoring!r}")
    mode = payload.get("mode") or "judge"
    if mode not in ("judge", "raw"):
        raise InvalidPayload("mode", f"must be 'judge' or 'raw', got {mode!r}")
    tol = _num(payload, "float_tol", positive=False)
    mem = _num(payload, "memory_limit_mb")
    cap = _num(payload, "speedup_cap")
    return JudgedPayload(
        code=code,
        tests=tuple(tests),
        compare=compare,
        float_tol=DEFAULT_FLOAT_TOL if tol is None else tol,
        scoring=scoring,
        reference_time_s=_num(payload, "reference_time_s"),
        time_limit_s=_num(payload, "time_limit_s"),
        memory_limit_mb=None if mem is None else int(mem),
        speedup_cap=2.0 if cap is None else cap,
        mode=mode,
        files=_files(payload),
        fetch_files=_fetch_files(payload),
        compile_time_limit_s=_num(payload, "compile_time_limit_s"),
        fn_name=fn_name,
        asserts=raw_asserts is not None,
        timed_runs=_timed_runs(payload),
    )
