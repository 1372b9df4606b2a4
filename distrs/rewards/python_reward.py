"""The ``python`` reward type: one ``run`` stage executing the code once per test case.

Besides stdin/stdout tests it judges call-based tests (``fn_name``: each case's stdin holds the
JSON arguments, one per line, and its expected output the JSON return value, LeetCode style) and
assert tests (``asserts``: a list of test snippets, each run after the solution in its namespace;
a case passes when it exits 0), both through ``python_harness.py``.

The interpreter is ``DISTRS_JUDGE_PYTHON`` or, by default, the worker's own (so programs may use
the numeric libraries the image ships); its prefixes are bound read-only into the jail. It runs
with ``-I`` (isolated: no PYTHON* variables, no user site, script dir not on ``sys.path``) and
``-B`` (no bytecode writes).

Warm runner: with ``DISTRS_JUDGE_PYTHON_FORK_SERVER`` (the default) under the bwrap jail, a
request's cases run through a fork server (``python_forkserver_child.py``, host side in
``distrs/sandbox/forkserver.py``): one jail and one interpreter start per request, then one fork
per case, which runs the program as ``python -I -B main.py`` (or the harness) would, so verdicts
are the same as with a jail per case. Without namespaces (the degraded ``rlimits`` jail) there is
no PID namespace for the server to sweep, and every case gets its own run as before.

Zygote: with ``DISTRS_JUDGE_PYTHON_ZYGOTE`` (the default) and a worker that can switch uids or is
root of a user namespace of its own (the chart's default pods), the request's fork server is not started but forked, in fresh namespaces, from a zygote the sandbox
keeps per interpreter (``distrs/sandbox/zygote.py``): no bubblewrap and no interpreter start per
request, the same jail, the same server.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from distrs.core.model import Status
from distrs.core.reward_type import RewardType
from distrs.rewards.base import StageInput, StageOutput, stage_budget
from distrs.rewards.judge.cases import Verdict, fetch_outputs, run_tests, verdict_output, write_inputs
from distrs.rewards.judge.handler import JudgedHandler
from distrs.rewards.judge.limits import case_limits, limit_cuts
from distrs.rewards.judge.payload import JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits, Mounts, Sandbox, Session
from distrs.sandbox.forkserver import ForkServerSession, ServerJail, StartServer, server_limits
from distrs.sandbox.local import BWRAP, LocalSandbox, LocalSession

SOURCE = "main.py"
HARNESS = "harness.py"
HARNESS_SOURCE = Path(__file__).with_name("python_harness.py")
FORKSERVER_SOURCE = Path(__file__).with_name("python_forkserver_child.py")
# Python reports a source that does not compile before running anything, without a traceback
# header: '  File "main.py", line N' ... 'SyntaxError: ...'. Errors raised later (exec, import of a
# broken module) come with "Traceback (most recent call last):" and stay runtime errors.
_COMPILE_ERROR = re.compile(r"^(SyntaxError|IndentationError|TabError): ", re.MULTILINE)


def compile_error_of(v: Verdict) -> str | None:
    """The interpreter's message when the source itself does not compile, else None."""
    if not v.cases or v.cases[0].status is not Status.RUNTIME_ERROR:
        return None
    stderr = str(v.cases[0].detail.get("stderr", ""))
    if stderr.startswith("  File ") and _COMPILE_ERROR.search(stderr):
        return stderr
    return None


def forkserver_source() -> str:
    """The fork server's program (``python_forkserver_child.py``); a handler reads it once."""
    return FORKSERVER_SOURCE.read_text()


def _zygote_start(
    sandbox: Sandbox, session: Session, exe: str, source: str, script_args: list[str], mounts: Mounts
) -> StartServer | None:
    """How to start the request's fork server (program ``source``) from the sandbox's warm
    zygote, where it has one."""
    if not isinstance(sandbox, LocalSandbox) or not isinstance(session, LocalSession):
        return None
    zygote = sandbox.zygote(exe, source, mounts)
    if zygote is None:
        return None

    def start(limits: Limits) -> ServerJail:
        return session.start_forked(zygote, script_args, limits=server_limits(limits))

    return start


@contextmanager
def case_runner(
    session: Session,
    argv: Sequence[str],
    *,
    source: str,
    isolation: str,
    enabled: bool,
    mounts: Mounts,
    sandbox: Sandbox | None = None,
    zygote: bool = False,
) -> Iterator[Session]:
    """The session the cases of ``argv`` (``exe -I -B SCRIPT ARGS``) run in: a fork server (program
    ``source``) in front of ``session`` where enabled and the jail has a PID namespace, else
    ``session``; with ``zygote``, the server is forked from ``sandbox``'s zygote where it has one."""
    if not enabled or isolation != BWRAP:
        yield session
        return
    exe, script_args = argv[0], list(argv[3:])
    start = _zygote_start(sandbox, session, exe, source, script_args, mounts) if zygote and sandbox else None
    runner = ForkServerSession(
        session,
        program=argv,
        server=[exe, "-I", "-B", "-c", source, *script_args],
        isolation=isolation,
        mounts=mounts,
        start=start,
    )
    try:
        yield runner
    finally:
        runner.close()


class PythonRunHandler(JudgedHandler):
    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        super().__init__(sandbox, settings)
        self._server_source: str | None = None

    def ready(self) -> tuple[bool, str]:
        try:
            self.python.get()
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            return False, f"python interpreter unusable: {e}"
        return super().ready()

    def server_source(self) -> str:
        if self._server_source is None:
            self._server_source = forkserver_source()
        return self._server_source

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        exe, mounts = self.python.get()
        sandbox = self.sandbox
        limits = case_limits(p, self._settings, Limits())
        check = self.special_judge(inp, p)
        argv = [exe, "-I", "-B", SOURCE]
        if p.fn_name or p.asserts:  # call-based / assert tests: our harness runs the solution
            argv = [exe, "-I", "-B", HARNESS, *(["call", p.fn_name] if p.fn_name else ["assert"])]
        with sandbox.session() as s:
            write_inputs(s, p)
            s.write_file(SOURCE, p.code.encode())
            if p.fn_name or p.asserts:
                s.write_file(HARNESS, HARNESS_SOURCE.read_bytes())
            enabled = self._settings.python_fork_server
            zygote = self._settings.python_zygote
            with case_runner(
                s,
                argv,
                source=self.server_source(),
                isolation=sandbox.isolation,
                enabled=enabled,
                mounts=mounts,
                sandbox=sandbox,
                zygote=zygote,
            ) as runner:
                v = run_tests(runner, argv, p, limits, stage_budget(inp), mounts=mounts, check=check)
            files = fetch_outputs(s, p)
        message = compile_error_of(v) if p.mode == "judge" else None
        if message is not None:
            return StageOutput.final(
                Status.COMPILE_ERROR, 0.0, compiler_output=message, isolation=sandbox.isolation
            )
        cut = limit_cuts(p, self._settings, inp.stage, inp.timeout_s)
        return verdict_output(v, p, sandbox.isolation, files, **cut)


# Entry point ``python`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="python", stages=("run",), handlers={"run": PythonRunHandler}, settings=JudgeSettings
)
