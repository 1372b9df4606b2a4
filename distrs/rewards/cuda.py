"""The ``cuda`` reward type: ``compile`` (nvcc, CPU worker) then ``execute`` (one owned GPU).

The compile stage runs ``nvcc`` in the sandbox and ships the binary as the ``binary`` artifact
(base64; binaries over ``MAX_BINARY_BYTES`` are a compile error, so artifacts stay under the
16 MiB lease limit). The execute stage runs it once per test case with the GPU device nodes
bound into the jail and ``CUDA_VISIBLE_DEVICES`` passed through (the worker owns exactly one
GPU), judges outputs like ``cpp`` and records each case's wall time. Where the score depends on
speed, each passed case then runs ``timed_runs`` more times, each in a fresh session and judged,
and is charged its fastest (``judge/timing.py``): one run's time carries its process's noise.
Each run is timed from inside its jail, from the program's exec to its exit
(``sandbox/exec_timer.py``), so the jail's own start and end are not charged.

Score (documented in docs/sandbox.md)::

    correctness = fraction of cases passed (or 0/1 with scoring="all")
    speedup     = reference_time_s / median over the passed cases of each case's time
                  (its fastest timed run; its one run with timed_runs=0)
    score       = correctness * (1/2 + 1/2 * min(speedup / speedup_cap, 1))   if reference_time_s
    score       = correctness                                                 otherwise

so a correct program scores at least 1/2 and reaches 1 at ``speedup_cap`` (default 2) times
the reference speed; an incorrect one never beats a correct one of the same speed.

Without a GPU the execute handler's ``ready()`` is false with the reason, so the worker does
not lease execute work instead of failing it. Results carry ``flags`` (``gpu_env.timing_flags``):
timing on a MIG slice is per slice, timing on a time-sliced GPU is unfit to rank kernels.
"""

from __future__ import annotations

import glob
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from distrs.core.model import Status
from distrs.core.reward_type import RewardType
from distrs.rewards import cuda_toolkit
from distrs.rewards.base import StageInput, StageOutput, stage_budget
from distrs.rewards.cuda_toolkit import Toolkit
from distrs.rewards.gpu_env import timing_flags
from distrs.rewards.judge import handler
from distrs.rewards.judge.cases import Verdict, case_details, raw_run, run_tests, score_of
from distrs.rewards.judge.handler import BINARY, JudgedHandler, binary_artifact
from distrs.rewards.judge.limits import case_limits
from distrs.rewards.judge.payload import JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.judge.timing import time_cases
from distrs.sandbox import Limits, MemoryKind, Mounts, Sandbox, Session
from distrs.sandbox.exec_timer import ExecTimer, TimedSession
from distrs.sandbox.jail import JAIL_WORKDIR
from distrs.sandbox.local import BWRAP


def cuda_score(correctness: float, speedup: float | None, cap: float) -> float:
    """correctness * (1/2 + 1/2 * min(speedup / cap, 1)); plain correctness without a speedup."""
    if speedup is None:
        return correctness
    return correctness * (0.5 + 0.5 * min(max(speedup, 0.0) / cap, 1.0))


def speed_of(v: Verdict, p: JudgedPayload) -> tuple[float | None, float | None]:
    """(median time of the passed cases, speedup over the reference) where known; a case's time is
    its fastest timed run (``judge/timing.py``)."""
    times = [c.time_s for c in v.cases if c.status is Status.OK]
    if not times:
        return None, None
    t = statistics.median(times)
    if p.reference_time_s is None or t <= 0:
        return t, None
    return t, p.reference_time_s / t


def gpu_devices(dev: str = "/dev") -> list[str]:
    """The NVIDIA GPU device nodes visible to this worker (``/dev/nvidia0`` ...)."""
    return sorted(p for p in glob.glob(os.path.join(dev, "nvidia[0-9]*")) if p[len(dev) + 7 :].isdigit())


def gpu_mounts(dev: str = "/dev") -> Mounts:
    """Device nodes the CUDA runtime opens, plus /sys it reads; all other devices stay hidden."""
    nodes = [*gpu_devices(dev), *glob.glob(os.path.join(dev, "nvidia-*")), os.path.join(dev, "nvidiactl")]
    nodes += glob.glob(os.path.join(dev, "nvidia-caps", "*"))
    return Mounts(dev_paths=tuple(sorted(set(nodes))), sys=True)


class CompileHandler(handler.CompileHandler):
    """nvcc → artifact ``binary``; compile errors end the request ``compile_error``.

    nvcc is resolved once per handler, on the worker (``cuda_toolkit.py``; the worker's image does
    not change under it), and run by absolute path; while it is not found, it is looked for again."""

    source = "main.cu"

    def __init__(self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None) -> None:
        super().__init__(sandbox, settings)
        self._toolkit: Toolkit | None = None

    def toolkit(self) -> Toolkit | None:
        if self._toolkit is None:
            s = self._settings
            self._toolkit = cuda_toolkit.resolve(s.nvcc, s.cuda_home)
        return self._toolkit

    def absent(self) -> str | None:
        """No CUDA toolkit in this install: a compile pool built without one serves the other types."""
        if self.toolkit() is None:
            return cuda_toolkit.missing(self._settings.nvcc, self._settings.cuda_home)
        return None

    def ready(self) -> tuple[bool, str]:
        if self.toolkit() is None:
            return False, cuda_toolkit.missing(self._settings.nvcc, self._settings.cuda_home)
        return super().ready()

    def run(self, inp: StageInput) -> StageOutput:
        if self.toolkit() is None:  # never leased while not ready; if it was, not the model's fault
            why = cuda_toolkit.missing(self._settings.nvcc, self._settings.cuda_home)
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=why)
        return super().run(inp)

    def compiler(self) -> list[str]:
        tk = self.toolkit()
        return [tk.nvcc if tk is not None else self._settings.nvcc, *self._settings.nvcc_flags]

    def tool_mounts(self) -> Mounts | None:
        tk = self.toolkit()
        paths = cuda_toolkit.jail_ro_paths(tk) if tk is not None else ()
        return Mounts(ro_paths=paths) if paths else None

    def memory_mb(self) -> int:
        return max(self._settings.compile_memory_mb, 8192)

    def env(self) -> dict[str, str]:
        # nvcc's intermediate files go to the work dir (disk, FSIZE-limited), not the tmpfs.
        return {"TMPDIR": JAIL_WORKDIR}


class ExecuteHandler(JudgedHandler):
    def __init__(
        self, sandbox: Sandbox | None = None, settings: JudgeSettings | None = None, dev: str = "/dev"
    ) -> None:
        super().__init__(sandbox, settings)
        self._dev = dev
        self._timer: ExecTimer | None = None

    def ready(self) -> tuple[bool, str]:
        gpus = gpu_devices(self._dev)
        if not gpus:
            return False, f"no NVIDIA GPU on this worker (no {self._dev}/nvidia<N> device)"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if len(gpus) > 1 and (visible is None or "," in visible):
            return False, (
                f"worker sees {len(gpus)} GPUs; an execute worker must own exactly one "
                "(set CUDA_VISIBLE_DEVICES to one device)"
            )
        return super().ready()

    def run(self, inp: StageInput) -> StageOutput:
        ok, why = self.ready()
        if not ok:
            # A worker that is not ready should never lease; if it did, it is not the model's fault.
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=why)
        return super().run(inp)

    def exec_timer(self) -> ExecTimer | None:
        """The in-jail timer (``sandbox/exec_timer.py``) of the handler's interpreter, made on
        first use; None where it is turned off (runs are then timed on the host's clock)."""
        if not self._settings.exec_timer:
            return None
        if self._timer is None:
            self._timer = ExecTimer(self.python.get, own_pid_namespace=self.sandbox.isolation == BWRAP)
        return self._timer

    def timed_runs(self, p: JudgedPayload) -> int:
        """The payload's ``timed_runs``; else the setting where the score depends on speed, else 0."""
        if p.timed_runs is not None:
            return p.timed_runs
        return self._settings.timed_runs if p.reference_time_s is not None else 0

    def judge(self, inp: StageInput, p: JudgedPayload) -> StageOutput:
        binary = binary_artifact(inp)
        if isinstance(binary, StageOutput):
            return binary
        sandbox = self.sandbox
        # CUDA reserves huge virtual ranges: limit writable memory (RLIMIT_DATA), not address space.
        limits = case_limits(p, self._settings, Limits(memory_kind=MemoryKind.DATA))
        env = {}
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        deadline = time.monotonic() + stage_budget(inp)
        argv = ["./" + BINARY]
        mounts = gpu_mounts(self._dev)
        timer = self.exec_timer()
        sessions: list[TimedSession] = []

        @contextmanager
        def open_session() -> Iterator[Session]:
            with sandbox.session() as s:
                sessions.append(TimedSession(s, timer))
                yield sessions[-1]

        def prepare(s: Session) -> None:
            s.write_file(BINARY, binary, executable=True)

        with open_session() as s:
            prepare(s)
            v = run_tests(s, argv, p, limits, deadline - time.monotonic(), env=env, mounts=mounts)
        runs = self.timed_runs(p)
        v = time_cases(open_session, prepare, argv, p, v, limits, runs, deadline, env=env, mounts=mounts)
        clock = {
            "program": sum(t.timed_runs for t in sessions),
            "jail": sum(t.host_runs for t in sessions),
        }
        correctness = score_of(v, p)
        t, speedup = speed_of(v, p)
        return StageOutput.final(
            v.status,
            cuda_score(correctness, speedup, p.speedup_cap),
            passed=v.passed,
            total=v.total,
            correctness=correctness,
            run_time_s=t,
            reference_time_s=p.reference_time_s,
            speedup=speedup,
            timed_runs=runs,
            runs_by_clock=clock,
            tests=case_details(v),
            flags=timing_flags(),
            isolation=sandbox.isolation,
            **({"run": raw_run(v.first_run)} if p.mode == "raw" and v.first_run is not None else {}),
        )


# Entry point ``cuda`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="cuda",
    stages=("compile", "execute"),
    handlers={"compile": CompileHandler, "execute": ExecuteHandler},
    settings=JudgeSettings,
)
