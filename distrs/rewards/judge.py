"""Shared judging for the program reward types (``cpp``, ``python``, ``cuda``).

It validates the payload (DESIGN.md "Command line": ``code``, ``tests``, ``compare``,
``float_tol``, ``scoring``, ``reference_time_s``; plus optional ``time_limit_s`` and
``memory_limit_mb`` (which may lower the default and raise it up to ``DISTRS_JUDGE_MAX_MEMORY_MB``),
``files`` (relative file path -> base64 content, written into the work dir with its
directories), ``fetch_files`` (paths read back after the run into ``detail.files``, base64;
relative to the work dir, or absolute as the program sees them) and ``mode: "raw"`` to also
get the first case's run in ``detail.run`` with up to SandboxFusion's 1 MiB per stream), runs a
program once per test case inside a sandbox session, compares outputs and scores the run.

Time budget: the whole stage gets ``StageInput.timeout_s``; each test gets the smaller of its
own limit and what is left of the stage budget, and the cases that no longer fit end
``timeout`` without running. With ``scoring="all"`` judging stops at the first failure.

Status of the request: ``ok`` when every case passes, otherwise the status of the first
failing case (``wrong_answer``, ``runtime_error`` or ``timeout``). A sandbox failure raises
``SandboxError`` and ends ``internal_error`` - never the model's fault.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from distrs import sandbox
from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.compare import DEFAULT_FLOAT_TOL, Compare, outputs_match
from distrs.sandbox import Limits, Mounts, RunResult, Sandbox, Session, Termination

MiB = 1 << 20
SNIPPET_CHARS = 400
# Artifacts travel base64-encoded; 16 MiB is the proxy's limit per lease.
MAX_BINARY_BYTES = 11 * MiB


class JudgeSettings(BaseSettings):
    """Compilers, interpreters and default limits for judged types (``DISTRS_JUDGE_*``)."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_JUDGE_", extra="ignore")

    cxx: str = Field(default="g++", description="C++ compiler.")
    cxx_flags: list[str] = Field(
        default_factory=lambda: ["-std=c++17", "-O2", "-pipe"], description="C++ compiler flags."
    )
    cxx_pch: bool = Field(
        default=True,
        description="Compile C++ with bits/stdc++.h precompiled for the compiler and exact flags "
        "(distrs/rewards/cxx_pch.py): used only by a program that includes it first with the same "
        "macros, so every program compiles to what it would without; 0 turns it off.",
    )
    cxx_pch_dir: str = Field(
        default="",
        description="Where a worker makes precompiled headers the image lacks (in the background); "
        "empty = TMPDIR/distrs-pch-UID, shared by this user's workers on the machine.",
    )
    cxx_pch_image_dir: str = Field(
        default="/usr/local/lib/distrs/pch",
        description="Precompiled headers made at image build (python -m distrs.rewards.cxx_pch DIR), "
        "looked up first.",
    )
    nvcc: str = Field(
        default="nvcc",
        description="CUDA compiler: an absolute path, or a name looked up in the bin of "
        "DISTRS_JUDGE_CUDA_HOME, $CUDA_HOME and /usr/local/cuda, then on the worker's PATH; the "
        "jail runs what is found by absolute path (distrs/rewards/cuda_toolkit.py).",
    )
    cuda_home: str = Field(default="", description="CUDA toolkit to find nvcc in first; empty = $CUDA_HOME.")
    nvcc_flags: list[str] = Field(
        default_factory=lambda: [
            "-O2",
            "-gencode=arch=compute_80,code=[sm_80,compute_80]",
            "-gencode=arch=compute_90,code=sm_90",
        ],
        description="nvcc flags (targets A100 and H100; PTX lets newer GPUs JIT).",
    )
    python: str = Field(default="", description="Interpreter for the python type; empty = the worker's own.")
    python_fork_server: bool = Field(
        default=True,
        description="Run the python type's test cases through a fork server: one jail and one "
        "interpreter start per request and a fork per case, instead of a jail and an interpreter "
        "per case (the same verdicts; see docs/sandbox.md).",
    )
    python_zygote: bool = Field(
        default=True,
        description="With the fork server: fork each request's server, in fresh namespaces, from "
        "a warm zygote started once per worker instead of starting a jail and an interpreter per "
        "request (root workers and non-root workers in a user namespace of their own, the chart's "
        'default; see docs/sandbox.md "Python zygote").',
    )
    compile_time_s: float = Field(
        default=60.0,
        gt=0,
        description="Compile wall limit, and the most a payload's compile_time_limit_s (/run_code's "
        "compile_timeout) is honoured up to (capped by the stage).",
    )
    compile_memory_mb: int = Field(default=4096, gt=0, description="Compiler address-space limit.")
    compile_cache_mb: int = Field(
        default=256, ge=0, description="Per compile worker: size of the cache of recent compile outcomes."
    )
    test_time_s: float = Field(
        default=10.0, gt=0, description="Default wall limit per test case (when the payload names none)."
    )
    max_test_time_s: float = Field(
        default=60.0,
        gt=0,
        description="Largest wall limit per test case a payload's time_limit_s (/run_code's "
        "run_timeout) is honoured up to; a larger request is cut to it and the result says so. "
        "The stage's timeout_s (pipelines) bounds it too.",
    )
    memory_mb: int = Field(default=1024, gt=0, description="Default memory limit per test case.")
    max_memory_mb: int = Field(
        default=4096, gt=0, description="Largest memory limit a payload's memory_limit_mb may ask for."
    )
    max_tests: int = Field(default=256, ge=1, description="Most test cases per request.")
    max_code_bytes: int = Field(default=512 * 1024, ge=1, description="Largest accepted source.")
    output_bytes: int = Field(default=4 * MiB, ge=1024, description="Captured stdout cap per test case.")


@functools.cache
def judge_settings() -> JudgeSettings:
    return JudgeSettings()


def shared_sandbox() -> Sandbox:
    """One sandbox per worker process, created on first use (probing bwrap once); SandboxError
    (remembered, with the one-line reason) where no safe jail can be built."""
    return sandbox.shared()


class InvalidPayload(ValueError):
    """The payload is malformed; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def output(self) -> StageOutput:
        return StageOutput.final(Status.INVALID, 0.0, error={"field": self.field, "message": self.message})


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
    )


def snippet(data: bytes | str, limit: int = SNIPPET_CHARS) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def case_limits(p: JudgedPayload, settings: JudgeSettings, base: Limits) -> Limits:
    """Per-test limits: ``base`` with the time, memory and output limits of the settings. The
    payload's time limit is honoured up to ``max_test_time_s`` (the default is ``test_time_s``),
    and its memory limit up to ``max_memory_mb`` (as SandboxFusion's ``memory_limit_MB``);
    memory stays unlimited where ``base`` leaves it so."""
    wall = min(p.time_limit_s or settings.test_time_s, settings.max_test_time_s)
    mem_mb = min(settings.max_memory_mb, p.memory_limit_mb) if p.memory_limit_mb else settings.memory_mb
    mem = None if base.memory_bytes is None else mem_mb * MiB
    return replace(base, wall_s=wall, cpu_s=wall, memory_bytes=mem, output_bytes=settings.output_bytes)


LIMITS_CUT_ARTIFACT = "limits_cut"  # the compile stage's cuts, carried to the run stage (JSON)


def limit_cuts(
    p: JudgedPayload,
    settings: JudgeSettings,
    stage: str,
    stage_timeout_s: float,
    *,
    compiles: bool = False,
    runs: bool = True,
    earlier: str | None = None,
) -> dict[str, Any]:
    """``{"limits_cut": [...]}`` when the payload asked for more time than it gets: one entry per
    cut limit with the field, what was asked, what applies and the setting that decided it
    (``DISTRS_JUDGE_MAX_TEST_TIME_S``, ``DISTRS_JUDGE_COMPILE_TIME_S`` or the stage's
    ``timeout_s``); ``{}`` otherwise. ``compiles``/``runs``: this stage runs the compile step /
    the tests; ``earlier``: the cuts an earlier stage reported (its ``limits_cut`` artifact)."""
    budget = budget_of(stage_timeout_s)
    stage_setting = f"stages.{stage}.timeout_s (pipelines: {stage_timeout_s:g} s)"
    asked: list[tuple[str, float | None, float, str]] = []
    if runs:
        asked.append(
            ("time_limit_s", p.time_limit_s, settings.max_test_time_s, "DISTRS_JUDGE_MAX_TEST_TIME_S")
        )
    if compiles:
        asked.append(
            (
                "compile_time_limit_s",
                p.compile_time_limit_s,
                settings.compile_time_s,
                "DISTRS_JUDGE_COMPILE_TIME_S",
            )
        )
    cuts: list[dict[str, Any]] = []
    if earlier:
        try:
            prior = json.loads(earlier)
        except ValueError:
            prior = []
        cuts += [c for c in prior if isinstance(c, dict)] if isinstance(prior, list) else []
    for name, want, ceiling, setting in asked:
        if want is None:
            continue
        got = min(want, ceiling, budget)
        if got < want:
            cuts.append(
                {
                    "field": name,
                    "requested_s": want,
                    "effective_s": round(got, 3),
                    "setting": setting if ceiling <= budget else stage_setting,
                }
            )
    return {"limits_cut": cuts} if cuts else {}


@dataclass
class CaseResult:
    status: Status
    time_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "time_s": round(self.time_s, 4), **self.detail}


def judge_case(r: RunResult, case: Case, p: JudgedPayload) -> CaseResult:
    """Map one run to a case status; only the output's snippet is kept."""
    if r.timed_out:
        return CaseResult(Status.TIMEOUT, r.wall_s, {"reason": r.describe()})
    if r.termination is Termination.OUTPUT_LIMIT:
        return CaseResult(Status.RUNTIME_ERROR, r.wall_s, {"reason": "output limit exceeded"})
    if r.memory_exceeded:
        return CaseResult(
            Status.MEMORY_LIMIT_EXCEEDED, r.wall_s, {"reason": r.describe(), "stderr": snippet(r.stderr)}
        )
    if not r.ok:
        return CaseResult(
            Status.RUNTIME_ERROR, r.wall_s, {"reason": r.describe(), "stderr": snippet(r.stderr)}
        )
    got = r.stdout.decode("utf-8", errors="replace")
    if not case.check_output or outputs_match(got, case.expected_stdout, p.compare, p.float_tol):
        return CaseResult(Status.OK, r.wall_s)
    return CaseResult(
        Status.WRONG_ANSWER,
        r.wall_s,
        {"stdout": snippet(got), "expected": snippet(case.expected_stdout)},
    )


@dataclass
class Verdict:
    status: Status
    passed: int
    total: int
    cases: list[CaseResult]
    first_run: RunResult | None = None  # kept for mode="raw"

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def run_tests(
    session: Session,
    argv: Sequence[str],
    p: JudgedPayload,
    limits: Limits,
    budget_s: float,
    *,
    env: dict[str, str] | None = None,
    mounts: Mounts | None = None,
    clock: Callable[[], float] = time.monotonic,
    check: Callable[[RunResult, Case], CaseResult] | None = None,
) -> Verdict:
    """Run ``argv`` once per test case within ``budget_s`` seconds in total; ``check`` (a special
    judge, ``checker.py``) decides the cases whose program exited 0 instead of the comparison."""
    deadline = clock() + budget_s
    cases: list[CaseResult] = []
    first_run: RunResult | None = None
    for case in p.tests:
        left = deadline - clock()
        if left <= 0.05:
            cases.append(CaseResult(Status.TIMEOUT, 0.0, {"reason": "stage time budget exhausted"}))
            continue
        r = session.run(
            argv,
            limits=limits.capped(left),
            stdin=case.stdin.encode(),
            env=env,
            mounts=mounts,
        )
        if first_run is None:
            first_run = r
        res = check(r, case) if check is not None and r.ok else judge_case(r, case, p)
        cases.append(res)
        if res.status is not Status.OK and p.scoring == "all":
            break
    passed = sum(c.status is Status.OK for c in cases)
    first_bad = next((c.status for c in cases if c.status is not Status.OK), None)
    return Verdict(first_bad or Status.OK, passed, len(p.tests), cases, first_run)


def score_of(v: Verdict, p: JudgedPayload) -> float:
    if p.scoring == "all":
        return 1.0 if v.passed == v.total else 0.0
    return v.fraction


def case_details(v: Verdict, keep_output_of: int = 4) -> list[dict[str, Any]]:
    """Per-case results; output snippets only for the first few failures (results stay small)."""
    out = []
    shown = 0
    for c in v.cases:
        d = c.as_dict()
        if c.status is not Status.OK:
            shown += 1
            if shown > keep_output_of:
                d.pop("stdout", None)
                d.pop("expected", None)
                d.pop("stderr", None)
        out.append(d)
    return out


# SandboxFusion keeps the first 1 MiB of each stream (sandbox/runners/base.py,
# _MAX_CAPTURED_OUTPUT_BYTES); so do we, and unlike it we say when we cut.
RAW_OUTPUT_BYTES = 1 * MiB


def raw_run(r: RunResult) -> dict[str, Any]:
    """A run as SandboxFusion reports it: each stream's first RAW_OUTPUT_BYTES, with flags saying
    whether it was cut and whether the program was stopped for writing past the capture cap."""
    code = r.exit_code if r.exit_code is not None else 128 + (r.signal or 0)
    return {
        "return_code": code,
        "timed_out": r.timed_out,
        "execution_time": round(r.wall_s, 4),
        "stdout": r.stdout[:RAW_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "stderr": r.stderr[:RAW_OUTPUT_BYTES].decode("utf-8", errors="replace"),
        "stdout_truncated": len(r.stdout) > RAW_OUTPUT_BYTES or r.stdout_truncated,
        "stderr_truncated": len(r.stderr) > RAW_OUTPUT_BYTES or r.stderr_truncated,
        "output_limit": r.termination is Termination.OUTPUT_LIMIT,
    }


def write_inputs(session: Session, p: JudgedPayload) -> None:
    """The payload's ``files``, written into the work dir before the program (which may overwrite)."""
    for name, data in p.files:
        session.write_file(name, data)


def fetch_outputs(session: Session, p: JudgedPayload) -> dict[str, str]:
    """``fetch_files`` read back after the run (base64); missing or oversized files are left out,
    as SandboxFusion leaves out missing ones."""
    out = {}
    for name in p.fetch_files:
        data = session.read_file(name, FETCH_FILE_BYTES)
        if data is not None:
            out[name] = encode_binary(data)
    return out


def verdict_output(
    v: Verdict, p: JudgedPayload, isolation: str, files: dict[str, str] | None = None, **extra: Any
) -> StageOutput:
    if p.mode == "raw" and v.first_run is not None:
        extra["run"] = raw_run(v.first_run)
    if p.fetch_files:
        extra["files"] = files or {}
    return StageOutput.final(
        v.status,
        score_of(v, p),
        passed=v.passed,
        total=v.total,
        tests=case_details(v),
        isolation=isolation,
        **extra,
    )


def stage_budget(inp: StageInput) -> float:
    """Time the handler may spend: the stage timeout less a small margin for reporting."""
    return budget_of(inp.timeout_s)


def budget_of(stage_timeout_s: float) -> float:
    """:func:`stage_budget` of a stage with this timeout."""
    return max(0.5, stage_timeout_s * 0.95 - 0.25)


def encode_binary(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def decode_binary(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def compile_program(
    session: Session,
    argv: Sequence[str],
    output_name: str,
    *,
    timeout_s: float,
    memory_mb: int,
    env: dict[str, str] | None = None,
    mounts: Mounts | None = None,
) -> tuple[StageOutput | None, bytes | None, RunResult]:
    """Run a compiler; (final output on failure, binary on success, the run)."""
    limits = Limits(
        wall_s=timeout_s,
        cpu_s=timeout_s,
        memory_bytes=memory_mb * MiB,
        nproc=128,
        fsize_bytes=256 * MiB,
        nofile=512,
        output_bytes=256 * 1024,
        tmpfs_bytes=256 * MiB,
    )
    r = session.run(argv, limits=limits, env=env, mounts=mounts)
    compiler_output = snippet(r.stderr + r.stdout, 8000)
    if r.timed_out:
        return (
            StageOutput.final(
                Status.TIMEOUT, 0.0, stage="compile", reason=r.describe(), compiler_output=compiler_output
            ),
            None,
            r,
        )
    if not r.ok:
        return (
            StageOutput.final(
                Status.COMPILE_ERROR, 0.0, reason=r.describe(), compiler_output=compiler_output
            ),
            None,
            r,
        )
    binary = session.read_file(output_name, MAX_BINARY_BYTES)
    if binary is None:
        return (
            StageOutput.final(
                Status.COMPILE_ERROR,
                0.0,
                reason=f"compiler produced no binary of at most {MAX_BINARY_BYTES} bytes",
                compiler_output=compiler_output,
            ),
            None,
            r,
        )
    return None, binary, r
