"""The ``math`` reward type: one ``verify`` stage using math-verify.

Payload: ``{"completion": str, "ground_truth": str, "boxed"?: "last"|"first"|"all_equal"}``.
When the completion has ``\\boxed{}`` (or ``\\fbox{}``) answers, the box chosen by ``boxed``
(default ``DISTRS_MATH_BOXED``, ``last``: a completion that corrects itself is judged on its final
answer) is the answer (``boxed.py``); without a box, math-verify extracts the last LaTeX/plain
expression. The answer is checked for mathematical equivalence with the ground truth (fractions,
LaTeX, sets, intervals, units, percent, ...).

Why a child process: math-verify parses untrusted text with SymPy (whose ``parse_expr`` evaluates
Python) and can hang on adversarial input; its own timeouts use SIGALRM, which only works in a
process's main thread, while handlers run in worker threads. So checking happens in a
long-lived child running ``math_child.py`` inside the sandbox (no network, read-only system,
rlimits), started once (importing SymPy takes most of a second) and killed - whole jail - when a
check overruns the hard deadline; the next request starts a fresh one. The child keeps parsed
ground truths (immutable, keyed by their text; ``gold_cache``), since a GRPO group's completions
share one, and parsed answers (``answer_cache``, by the extracted answer's text), since those
completions mostly box the same few answers.

Statuses: ``ok`` (score 1), ``wrong_answer`` (score 0; ``detail.reason`` says whether no answer
was found), ``timeout``, ``invalid`` (bad payload or an unparseable ground truth).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from distrs import sandbox as sandboxes
from distrs.core.model import Status
from distrs.core.reward_type import RewardType
from distrs.rewards.base import MiB, StageInput, StageOutput, snippet, stage_budget
from distrs.rewards.boxed import BoxChoice, chosen_answers
from distrs.rewards.interpreter import Interpreter
from distrs.sandbox import Limits, Sandbox, SandboxError

CHILD_SOURCE = Path(__file__).with_name("math_child.py")


class MathSettings(BaseSettings):
    """Limits of the math checker (``DISTRS_MATH_*``)."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_MATH_", extra="ignore")

    timeout_s: float = Field(
        default=10.0, gt=0, description="Hard wall limit per check (capped by the stage)."
    )
    inner_timeout_s: int = Field(default=5, ge=1, description="math-verify's own parse/verify timeouts.")
    max_chars: int = Field(default=100_000, ge=100, description="Longest accepted completion/ground truth.")
    tail_chars: int = Field(
        default=20_000, ge=100, description="Only the completion's last N chars are searched for an answer."
    )
    memory_mb: int = Field(default=4096, gt=0, description="Address-space limit of the checker child.")
    recycle_after: int = Field(
        default=10_000,
        ge=1,
        description="Restart the child after this many checks (a restart costs about half a CPU-second).",
    )
    gold_cache: int = Field(
        default=1024,
        ge=0,
        le=100_000,
        description="Parsed ground truths each checker child keeps (least recently used dropped "
        "first; 0 = parse every time). GRPO's n completions of a prompt share one ground truth.",
    )
    answer_cache: int = Field(
        default=4096,
        ge=0,
        le=100_000,
        description="Parsed answers each checker child keeps, by the extracted answer's text (least "
        "recently used dropped first; 0 = parse every time). A GRPO group's completions mostly box "
        "the same few answers.",
    )
    python: str = Field(
        default="", description="Interpreter with math-verify installed; empty = the worker's."
    )
    boxed: BoxChoice = Field(
        default=BoxChoice.LAST,
        description="Which \\boxed{} answer counts when there are several: last, first or all_equal "
        "(every box must be right); a payload's `boxed` field overrides it.",
    )


class CheckTimeout(Exception):
    pass


class OutOfStep(SandboxError):
    """The child's reply was not the answer to the request just sent."""


class MathChecker:
    """A restartable jailed ``math_child.py``; one check at a time.

    Checks are never pipelined (several requests written before the replies are read): a child
    compromised by one completion could then read the ids of the requests queued behind it and
    forge their replies. With one request in flight, the only id the child knows is its own.
    """

    def __init__(self, sandbox: Sandbox, settings: MathSettings, child_source: Path = CHILD_SOURCE) -> None:
        self._sandbox = sandbox
        self._settings = settings
        self._child_source = child_source
        self._python = Interpreter(settings.python)
        self._req_id = 0
        self._lock = threading.Lock()
        self._stack: ExitStack | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._served = 0
        self._sel: selectors.BaseSelector | None = None  # watches the child's reply pipe

    def _start(self, deadline: float) -> subprocess.Popen[bytes]:
        exe, mounts = self._python.get()
        stack = ExitStack()
        session = stack.enter_context(self._sandbox.session())
        session.write_file("math_child.py", self._child_source.read_bytes())
        limits = Limits(
            wall_s=3600.0,
            cpu_s=3600.0,  # lifetime CPU; recycling keeps a busy child well below it
            memory_bytes=self._settings.memory_mb * MiB,
            nproc=32,
            fsize_bytes=1 * MiB,
            nofile=64,
        )
        env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        argv = [exe, "-I", "-B", "math_child.py", "--gold-cache", str(self._settings.gold_cache)]
        argv += ["--answer-cache", str(self._settings.answer_cache)]
        proc = session.spawn(argv, limits=limits, env=env, mounts=mounts)
        self._stack, self._proc, self._buf, self._served = stack, proc, b"", 0
        assert proc.stdout is not None
        self._sel = selectors.DefaultSelector()  # one per child, not two per check
        self._sel.register(proc.stdout.fileno(), selectors.EVENT_READ)
        try:
            hello = self._read_line(max(deadline, time.monotonic() + 30.0))
        except CheckTimeout:
            self.close()
            raise SandboxError("math checker did not start within 30 s") from None
        if not hello.get("ready"):
            self.close()
            raise SandboxError(f"math checker failed to start: {hello}")
        return proc

    def _read_line(self, deadline: float) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        sel = self._sel
        assert sel is not None
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CheckTimeout
            if not sel.select(left):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise SandboxError("math checker exited unexpectedly")
            self._buf += chunk
            if len(self._buf) > 1 * MiB:
                raise SandboxError("math checker wrote an oversized reply")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            raise SandboxError(f"math checker wrote a non-JSON line: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise SandboxError("math checker reply is not an object")
        return msg

    def _stale(self) -> bool:
        """Whether the child wrote anything outside a reply (leftovers, or bytes waiting now)."""
        if self._buf:
            return True
        assert self._sel is not None
        return bool(self._sel.select(0))

    def _ask(self, gold: str, answer: str, deadline: float) -> dict[str, Any]:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else None
        if proc is not None and self._stale():
            self.close()  # junk on the reply stream: never read it as the next verdict
            proc = None
        if proc is None:
            self.close()
            proc = self._start(deadline)
        assert proc.stdin is not None
        # unpredictable ids: a child cannot forge the reply to a request it has not seen yet
        self._req_id = secrets.randbits(62)
        req = {"id": self._req_id, "gold": gold, "answer": answer, "timeout": self._settings.inner_timeout_s}
        try:
            proc.stdin.write(json.dumps(req).encode() + b"\n")
            proc.stdin.flush()
            reply = self._read_line(deadline)
        except (CheckTimeout, SandboxError, OSError):
            self.close()
            raise
        if reply.get("id") != self._req_id:
            self.close()
            raise OutOfStep(f"math checker reply out of step: {str(reply)[:200]}")
        return reply

    def check(self, gold: str, answer: str, timeout_s: float) -> dict[str, Any]:
        """The child's verdict; CheckTimeout past ``timeout_s`` (the child is then killed).

        A reply that does not carry this request's id (a child that wrote junk on its reply
        stream) is never used: the child is replaced and the request asked once more of the fresh
        one, so a hostile earlier input cannot decide this one's verdict.
        """
        with self._lock:
            deadline = time.monotonic() + timeout_s
            try:
                reply = self._ask(gold, answer, deadline)
            except OutOfStep:
                reply = self._ask(gold, answer, deadline)
            self._served += 1
            if self._served >= self._settings.recycle_after:
                self.close()
            return reply

    def close(self) -> None:
        proc, stack, sel = self._proc, self._stack, self._sel
        self._proc, self._stack, self._sel = None, None, None
        if sel is not None:
            sel.close()
        if proc is not None:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    with suppress(OSError):
                        f.close()
        if stack is not None:
            stack.close()


def _text(payload: Any, name: str, max_chars: int) -> str:
    v = payload.get(name)
    if not isinstance(v, str):
        raise ValueError(f"{name}: must be a string")
    if len(v) > max_chars:
        raise ValueError(f"{name}: longer than {max_chars} characters")
    if name == "ground_truth" and not v.strip():
        raise ValueError(f"{name}: must not be empty")
    return v


class VerifyHandler:
    def __init__(self, sandbox: Sandbox | None = None, settings: MathSettings | None = None) -> None:
        self._settings = settings or MathSettings()
        self._sandbox = sandbox
        self._checker: MathChecker | None = None
        self._installed = False

    def ready(self) -> tuple[bool, str]:
        # Only whether it is installed: the checking happens in the child, so the worker (asked
        # before every request) never imports SymPy itself.
        if not self._installed:
            try:
                self._installed = importlib.util.find_spec("math_verify") is not None
            except (ImportError, ValueError) as e:
                return False, f"math-verify not installed: {e}"
            if not self._installed:
                return False, "math-verify not installed: no module named 'math_verify'"
        return (True, "") if self._sandbox is not None else sandboxes.readiness()

    def _get_checker(self) -> MathChecker:
        if self._checker is None:
            self._checker = MathChecker(self._sandbox or sandboxes.shared(), self._settings)
        return self._checker

    def run(self, inp: StageInput) -> StageOutput:
        if not isinstance(inp.payload, dict):
            return StageOutput.final(
                Status.INVALID, 0.0, error={"field": "payload", "message": "must be an object"}
            )
        try:
            completion = _text(inp.payload, "completion", self._settings.max_chars)
            gold = _text(inp.payload, "ground_truth", self._settings.max_chars)
        except ValueError as e:
            field, _, msg = str(e).partition(": ")
            return StageOutput.final(Status.INVALID, 0.0, error={"field": field, "message": msg})
        choice = self._settings.boxed
        if inp.payload.get("boxed") is not None:
            try:
                choice = BoxChoice(inp.payload["boxed"])
            except ValueError:
                known = ", ".join(c.value for c in BoxChoice)
                return StageOutput.final(
                    Status.INVALID, 0.0, error={"field": "boxed", "message": f"must be one of {known}"}
                )
        tail = completion[-self._settings.tail_chars :]
        boxes = chosen_answers(tail, choice)
        # Each chosen box goes to math-verify on its own, boxed again so it is read as the answer.
        answers = [tail] if boxes is None else ["\\boxed{" + b + "}" for b in boxes]
        timeout = min(self._settings.timeout_s, stage_budget(inp))
        deadline = time.monotonic() + timeout
        r: dict[str, Any] = {}
        for answer in answers:
            try:
                r = self._get_checker().check(gold, answer, max(0.05, deadline - time.monotonic()))
            except CheckTimeout:
                return StageOutput.final(Status.TIMEOUT, 0.0, reason=f"math check exceeded {timeout:.1f}s")
            if "error" in r:
                raise SandboxError(f"math checker error: {r['error']}")
            if not r.get("gold_ok"):
                return StageOutput.final(
                    Status.INVALID,
                    0.0,
                    error={"field": "ground_truth", "message": "no parseable answer in the ground truth"},
                )
            if not r.get("found") or not r.get("correct"):
                break  # all_equal: the first wrong box decides
        if not r.get("found"):
            return StageOutput.final(Status.WRONG_ANSWER, 0.0, reason="no answer found in the completion")
        detail: dict[str, Any] = {
            "extracted": snippet(str(r.get("pred", ""))),
            "ground_truth": snippet(str(r.get("gold", ""))),
        }
        if boxes is not None:
            detail["boxes"] = len(boxes)
            detail["boxed"] = choice.value
        if r.get("correct"):
            return StageOutput.final(Status.OK, 1.0, **detail)
        return StageOutput.final(Status.WRONG_ANSWER, 0.0, **detail)

    def close(self) -> None:
        if self._checker is not None:
            self._checker.close()


# Entry point ``math`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="math", stages=("verify",), handlers={"verify": VerifyHandler}, settings=MathSettings
)
