"""GPU health of an execute worker: check the GPU before the first lease and after any request that
ended in a CUDA error (or a timeout, which a hung kernel looks like), and step aside while it is sick.

A check is (1) an NVML reading (``worker.nvml``): memory held by processes that are not this
worker's, uncorrected ECC errors, page retirements / row remaps waiting for a reset, failed row
remaps, critical Xid events; then (2) a tiny test kernel (``worker.gpu_probe``) run in a child
process that must return the right answer within ``probe_timeout_s``. The rules (``assess``)
are pure and take the reading; ``GpuGuard`` holds the state:

* not checked yet, or sick: the worker is not ready (``Worker.readiness``), so it leases nothing
  rather than turning a broken GPU into a stream of failed verdicts. A sick GPU is re-checked
  every ``recheck_s`` (memory held by another process may be freed; a reset GPU comes back).
* the reason stays the same text while the same kinds of problem persist, so the worker logs
  one line per sickness, not one per re-check.
* after a request that ended in a CUDA error the GPU is checked before the result is reported:
  if it is sick, the request ends ``internal_error`` naming the GPU fault (never a score: it is
  not the model's fault); if it is healthy, the model's own error stands.

Xids 13, 31, 43 and 45 (graphics engine exception, MMU fault, GPU stopped processing, preemptive
cleanup) are what a faulty *program* raises; they alone do not make the GPU sick: the test
kernel then tells whether the GPU still works. Every other critical Xid does.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from distrs.core.model import Status
from distrs.rewards.base import StageOutput
from distrs.worker.nvml import GpuState, Nvml, NvmlError

log = logging.getLogger(__name__)

GiB = 1 << 30
APP_XIDS = frozenset({13, 31, 43, 45})


@dataclass(frozen=True)
class HealthLimits:
    other_memory_bytes: int = 1 * GiB
    """Memory that processes other than this worker's may hold on its GPU before it is sick."""
    probe_timeout_s: float = 30.0
    """The test kernel (context creation, PTX JIT, launch, copy back) must finish in this time."""
    recheck_s: float = 60.0
    """How often a sick GPU is checked again."""


@dataclass(frozen=True)
class Problem:
    kind: str  # other_processes | ecc | retirement_pending | remap_failed | xid | probe | nvml
    message: str


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def assess(state: GpuState, own_pids: Iterable[int], limits: HealthLimits) -> list[Problem]:
    """What is wrong with a GPU by its NVML reading (empty: nothing). Pure."""
    problems: list[Problem] = []
    mine = set(own_pids)
    others = [(pid, used) for pid, used in state.processes or () if pid not in mine]
    held = sum(used for _, used in others)
    if others and held > limits.other_memory_bytes:
        pids = ", ".join(str(pid) for pid, _ in others[:5])
        problems.append(
            Problem("other_processes", f"{_gib(held)} of GPU memory held by other processes (pid {pids})")
        )
    if state.ecc_uncorrected:
        problems.append(Problem("ecc", f"{state.ecc_uncorrected} uncorrected ECC errors since driver load"))
    if state.retirement_pending:
        problems.append(
            Problem("retirement_pending", "page retirement or row remap pending: GPU needs a reset")
        )
    if state.remap_failed:
        problems.append(Problem("remap_failed", "a row remap failed: GPU needs servicing"))
    bad_xids = sorted({x for x in state.xids if x not in APP_XIDS})
    if bad_xids:
        problems.append(Problem("xid", f"critical Xid {', '.join(map(str, bad_xids))}"))
    return problems


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    seconds: float
    error: str = ""


class Probe(Protocol):
    def __call__(self, timeout_s: float) -> ProbeResult: ...


class SubprocessProbe:
    """Runs ``python -m distrs.worker.gpu_probe`` (or ``command``) with a time limit; its JSON line
    says whether the kernel's answer was right."""

    def __init__(self, command: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.command = command or [sys.executable, "-m", "distrs.worker.gpu_probe"]
        self.env = env

    def __call__(self, timeout_s: float) -> ProbeResult:
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                self.command, capture_output=True, text=True, timeout=timeout_s, env=self.env, check=False
            )
        except subprocess.TimeoutExpired:
            return ProbeResult(False, time.monotonic() - t0, f"test kernel did not finish in {timeout_s:g} s")
        except OSError as exc:
            return ProbeResult(False, time.monotonic() - t0, f"test kernel could not start: {exc}")
        took = time.monotonic() - t0
        lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
        try:
            report = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            report = {}
        if not isinstance(report, dict) or "ok" not in report:
            tail = (p.stderr or p.stdout).strip()[-300:]
            return ProbeResult(False, took, f"test kernel exited {p.returncode} without a verdict: {tail}")
        ok = bool(report["ok"]) and p.returncode == 0
        return ProbeResult(ok, took, "" if ok else str(report.get("error") or f"exit {p.returncode}"))


def descendant_pids(root: int | None = None, proc: str = "/proc") -> set[int]:
    """``root`` (this process) and every process below it: the ones a check counts as ours."""
    root = os.getpid() if root is None else root
    parent: dict[int, int] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return {root}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            parent[int(name)] = int(fields[1])
    ours = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                changed = True
    return ours


@dataclass(frozen=True)
class HealthEvent:
    """One check: when (the guard's clock), why it ran, its verdict and what it found."""

    at: float
    trigger: str  # first | cuda_error | recheck
    ok: bool
    reason: str
    problems: tuple[Problem, ...] = ()
    probe_s: float | None = None
    gpu: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "trigger": self.trigger,
            "ok": self.ok,
            "reason": self.reason,
            "problems": [{"kind": p.kind, "message": p.message} for p in self.problems],
            "probe_s": self.probe_s,
            "gpu": self.gpu,
        }


def check_due(now: float, last: HealthEvent | None, flagged: bool, recheck_s: float) -> str | None:
    """Which check, if any, is due now: ``first``, ``cuda_error`` or ``recheck``. Pure."""
    if last is None:
        return "first"
    if flagged:
        return "cuda_error"
    if not last.ok and now - last.at >= recheck_s:
        return "recheck"
    return None


_CUDA_ERROR = re.compile(
    r"CUDA error|cudaError|CUDA_ERROR_|CUBLAS_STATUS_|cuDNN error|illegal memory access|"
    r"unspecified launch failure|uncorrectable ECC|device-side assert|GPU is lost|Xid",
    re.IGNORECASE,
)


def cuda_error_in(out: StageOutput) -> bool:
    """Whether a request's output looks like it met a CUDA error (or hung on the GPU): handlers
    may say so outright with ``detail["gpu_fault"] = True``; otherwise a timeout, or a failure
    whose detail mentions a CUDA error, counts."""
    if out.outcome != "final" or out.status is Status.OK:
        return False
    if out.detail.get("gpu_fault") is True or out.status is Status.TIMEOUT:
        return True
    if out.status not in (Status.RUNTIME_ERROR, Status.INTERNAL_ERROR, Status.WRONG_ANSWER):
        return False
    return bool(_CUDA_ERROR.search(json.dumps(out.detail, default=str)))


@dataclass
class _State:
    last: HealthEvent | None = None
    flagged: bool = False
    kinds: frozenset[str] = frozenset()
    reason: str = "GPU not checked yet"
    events: deque[HealthEvent] = field(default_factory=lambda: deque(maxlen=64))


class GpuGuard:
    """The health state of the one GPU an execute worker owns (shared by its threads)."""

    def __init__(
        self,
        nvml: Nvml,
        probe: Probe,
        selector: str | None = None,
        limits: HealthLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        own_pids: Callable[[], Iterable[int]] = descendant_pids,
        on_check: Callable[[HealthEvent], None] | None = None,
    ) -> None:
        self.nvml = nvml
        self.probe = probe
        self.selector = selector
        self.limits = limits or HealthLimits()
        self.clock = clock
        self.own_pids = own_pids
        self.on_check = on_check
        self._lock = threading.Lock()  # the state: held for moments only (``/readyz`` reads it)
        self._checking = threading.Lock()  # one check at a time: held for a whole check
        self._s = _State()

    # state -----------------------------------------------------------------------------------
    def ready(self) -> tuple[bool, str]:
        """The last check's verdict (no check runs here: ``/readyz`` must answer at once)."""
        with self._lock:
            last = self._s.last
            if last is None:
                return False, "GPU not checked yet"
            if self._s.flagged:
                return False, "GPU check pending after a CUDA error"
            return last.ok, "" if last.ok else self._s.reason

    @property
    def events(self) -> list[HealthEvent]:
        with self._lock:
            return list(self._s.events)

    def maybe_check(self) -> HealthEvent | None:
        """Run the check that is due (first, after a CUDA error, or a sick GPU's re-check)."""
        with self._checking:
            with self._lock:
                trigger = check_due(self.clock(), self._s.last, self._s.flagged, self.limits.recheck_s)
            if trigger is None:
                return None
            return self._check(trigger)

    def check(self, trigger: str = "manual") -> HealthEvent:
        with self._checking:
            return self._check(trigger)

    def _check(self, trigger: str) -> HealthEvent:
        """One check (the caller holds ``_checking``); the state is updated at the end."""
        gpu = self.selector or "0"
        probe_s = None
        try:
            state = self.nvml.read(self.selector)
            gpu = f"{state.name} {state.uuid}"
            problems = assess(state, self.own_pids(), self.limits)
        except NvmlError as exc:
            problems = [Problem("nvml", str(exc))]
        if not problems:  # the kernel only runs on a GPU NVML finds sound
            pr = self.probe(self.limits.probe_timeout_s)
            probe_s = pr.seconds
            if not pr.ok:
                problems.append(Problem("probe", f"test kernel failed: {pr.error}"))
        kinds = frozenset(p.kind for p in problems)
        with self._lock:
            if problems and kinds != self._s.kinds:  # same sickness, same words: one log line
                self._s.reason = f"GPU {gpu} unhealthy: " + "; ".join(p.message for p in problems)
            self._s.kinds = kinds
            ev = HealthEvent(
                self.clock(),
                trigger,
                not problems,
                self._s.reason if problems else "",
                tuple(problems),
                probe_s,
                gpu,
            )
            self._s.last = ev
            self._s.flagged = False
            self._s.events.append(ev)
        if self.on_check is not None:
            self.on_check(ev)
        return ev

    # requests --------------------------------------------------------------------------------
    def after_request(self, out: StageOutput) -> StageOutput:
        """Check the GPU after a request that met a CUDA error; a sick GPU makes the request
        ``internal_error`` (the fault is the GPU's), a healthy one leaves the verdict alone."""
        if not cuda_error_in(out):
            return out
        with self._lock:
            self._s.flagged = True  # not ready until the check below has spoken
        with self._checking:
            ev = self._check("cuda_error")
        if ev.ok:
            return out
        log.warning("request ended on a GPU fault: %s", ev.reason)
        return StageOutput.final(
            Status.INTERNAL_ERROR,
            0.0,
            error=f"GPU fault, not the program's: {ev.reason}",
            gpu_health=ev.as_dict(),
            program_status=out.status.value if out.status else None,
        )
