"""The ``execute`` stage of ``kernelbench``: the shipped candidate judged against the reference.

Per request, two fresh jailed processes (``run_child.py``), each in its own sandbox session:
the *reference* (``Model``) and the *candidate* (``ModelNew``, loading the modules the compile
stage shipped; nothing is compiled here). No CUDA context, stream, allocation or seed survives
a request, and the candidate never shares a process with the reference: it cannot read the
reference's freed output, change its inputs, or see the seeds before its inputs are made. The
host (this module) holds the verdict: it draws every seed (``secrets``), compares the outputs
itself (``compare.py``, numpy) and times calls on its own clock (``timing.py``).

1. Correctness: ``num_correct_trials`` trials, each with a fresh secret seed; the reference and
   the candidate make their inputs from it with the problem's ``get_inputs()``; outputs must be
   plain tensors on the device, not aliasing inputs, of the reference's shapes, and allclose.
   The candidate's extension must have been called (its calls are counted).
2. Timing (``measure_performance``): 3 warm-up calls each, then ``num_perf_trials`` + 1 timed
   calls (the first dropped), alternating reference and candidate with the same fresh seed per
   call, the L2 flushed before each (cuda), a device-wide sync and a digest of the outputs inside
   the timed window. Every candidate digest must agree with the reference's for that seed, and
   ``spot_checks`` random calls are re-read in full and compared. Extra threads are a hack.
3. A last correctness trial after timing (results cached across calls fail it); on a GPU, the
   profiler must show a kernel of the candidate's own sources.

Faults: the candidate's exceptions, crashes, illegal memory accesses and overruns are its own
(``runtime_error``, ``timeout``, ``wrong_answer``); anything the reference or the harness does
wrong is ``internal_error``, never a score.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.cuda import gpu_devices, gpu_mounts
from distrs.rewards.gpu_env import timing_flags
from distrs.rewards.interpreter import interpreter
from distrs.rewards.judge import InvalidPayload, MiB, stage_budget
from distrs.rewards.kernelbench.compare import BadTensors, compare, decode, digest, digest_matches
from distrs.rewards.kernelbench.compile import MODULES, child_files
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.handler_base import KernelHandler
from distrs.rewards.kernelbench.jailed import ChildGone, ChildTimeout, JailedChild
from distrs.rewards.kernelbench.payload import KernelPayload, parse_payload
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.timing import Call, charge, digest_agrees, stats
from distrs.rewards.kernelbench.toolchain import jail_env, jail_mounts
from distrs.sandbox import Limits, MemoryKind, Sandbox

WARMUP = 3
DIGEST_PRIME = 2_147_483_629  # weights ((i*a + b) mod p) / p; a, b drawn per call
MAX_OUTPUT_BYTES = 1024 * MiB
REF_CACHE_ITEMS = 1024


class CandidateFault(Exception):
    """The candidate failed or cheated: its verdict, never the service's."""

    def __init__(self, status: Status, reason: str, **detail: Any) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.detail = detail


class HarnessFault(Exception):
    """The reference or the harness failed: ``internal_error``."""


@dataclass
class Report:
    flags: list[dict[str, str]] = field(default_factory=list)
    max_difference: list[float] = field(default_factory=list)
    avg_difference: list[float] = field(default_factory=list)
    passed: int = 0
    versions: dict[str, Any] = field(default_factory=dict)


def _modules(inp: StageInput) -> list[dict[str, Any]]:
    raw = inp.artifacts.get(MODULES)
    if not raw:
        raise HarnessFault(f"no '{MODULES}' artifact from compile")
    try:
        mods = json.loads(raw)
        out = []
        for i, m in enumerate(mods):
            data = base64.b64decode(m["data"], validate=True)
            out.append({"key": str(m["key"]), "module": str(m["module"]), "file": f"ext{i}.so", "data": data})
        return out
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise HarnessFault(f"malformed '{MODULES}' artifact: {e}") from None


def _json_list(inp: StageInput, name: str) -> list[Any]:
    try:
        v = json.loads(inp.artifacts.get(name) or "[]")
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def _weights() -> tuple[int, int]:
    """(a, b) of a timed call's digest weights, drawn by the host."""
    return secrets.randbelow(DIGEST_PRIME - 1) + 1, secrets.randbelow(DIGEST_PRIME)


class RefTimes:
    """Reference runtimes per (problem, precision, trials, hardware, torch): a problem's
    reference is timed once per GPU model and torch version, not once per sample."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            v = self._items.get(key)
            if v is not None:
                self._items.move_to_end(key)
            return v

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > REF_CACHE_ITEMS:
                self._items.popitem(last=False)


class ExecuteHandler(KernelHandler):
    def __init__(
        self, sandbox: Sandbox | None = None, settings: KernelSettings | None = None, dev: str = "/dev"
    ) -> None:
        super().__init__(sandbox, settings)
        self._dev = dev
        self.ref_times = RefTimes()

    def ready(self) -> tuple[bool, str]:
        ok, why = self.toolchain_ready()
        if not ok:
            return ok, why
        if self._settings.device == "cuda":
            gpus = gpu_devices(self._dev)
            if not gpus:
                return False, (
                    f"no NVIDIA GPU on this worker (no {self._dev}/nvidia<N> device); "
                    "DISTRS_KERNELS_DEVICE=cpu serves CPU extensions (backend 'cpp') only"
                )
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if len(gpus) > 1 and (visible is None or "," in visible):
                return False, f"worker sees {len(gpus)} GPUs; an execute worker must own exactly one"
        return self.sandbox_ready()

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload)
        except InvalidPayload as e:
            return e.output()
        if p.device == "cuda" and self._settings.device != "cuda":
            return StageOutput.final(
                Status.INTERNAL_ERROR, 0.0, error="backend 'cuda' reached an execute worker without a GPU"
            )
        ok, why = self.ready()
        if not ok:
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=why)
        report = Report(flags=_json_list(inp, "flags"))
        try:
            return Judge(self, inp, p, report).run()
        except HarnessFault as e:
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=str(e), compiled=True)
        except CandidateFault as e:
            return self.verdict_of_fault(p, report, e)

    def verdict_of_fault(self, p: KernelPayload, report: Report, e: CandidateFault) -> StageOutput:
        value = score(p.reward, Outcome(Stage.INCORRECT), p.speedup_cap)
        metadata: dict[str, Any] = {
            "correctness_trials": f"({report.passed} / {p.num_correct_trials})",
            "hardware": report.versions.get("gpu", "cpu"),
            "device": p.device,
        }
        if report.max_difference:
            metadata["max_difference"] = [f"{d:.6g}" for d in report.max_difference]
            metadata["avg_difference"] = [f"{d:.6g}" for d in report.avg_difference]
        key = "runtime_error" if e.status in (Status.RUNTIME_ERROR, Status.TIMEOUT) else "correctness_issue"
        metadata[key] = e.reason
        metadata.update(e.detail)
        # the worker checks its GPU before leasing again (worker/gpu_health.py)
        extra = {"gpu_fault": True} if e.detail.get("cuda_error") else {}
        return StageOutput.final(
            e.status,
            value,
            compiled=True,
            correctness=False,
            runtime=-1.0,
            ref_runtime=-1.0,
            metadata=metadata,
            flags=report.flags,
            versions=report.versions,
            outcome=Stage.INCORRECT.value,
            reason=e.reason,
            **extra,
        )


class Judge:
    """One request's judging: two jailed processes, every seed and verdict on this side."""

    def __init__(self, handler: ExecuteHandler, inp: StageInput, p: KernelPayload, report: Report) -> None:
        self.h = handler
        self.s = handler._settings
        self.inp = inp
        self.p = p
        self.report = report
        self.deadline = time.monotonic() + stage_budget(inp)

    # -- processes ---------------------------------------------------------------------------

    def _left(self, cap: float) -> float:
        return max(0.05, min(cap, self.deadline - time.monotonic()))

    def _start(self, stack: ExitStack, files: dict[str, bytes]) -> JailedChild:
        exe, _ = interpreter(self.s.python)
        session = stack.enter_context(self.h.sandbox.session(disk_bytes=256 * MiB))
        for name, data in files.items():
            session.write_file(name, data)
        extra = gpu_mounts(self.h._dev) if self.p.device == "cuda" else None
        limits = Limits(
            wall_s=3600.0,
            cpu_s=3600.0,
            memory_bytes=self.s.execute_memory_mb * MiB,
            memory_kind=MemoryKind.DATA,
            nproc=512,
            fsize_bytes=64 * MiB,
            nofile=1024,
            tmpfs_bytes=256 * MiB,
        )
        helper = session.start(
            [exe, "-I", "-B", "run_child.py"],
            limits=limits,
            env=jail_env(self.s, build=False),
            mounts=jail_mounts(self.s, extra),
        )
        child = JailedChild(helper, MAX_OUTPUT_BYTES)
        stack.callback(child.close)
        return child

    def _ref(self, cmd: dict[str, Any], cap: float | None = None) -> tuple[dict[str, Any], bytes]:
        try:
            reply, blob = self.ref.ask(cmd, self._left(cap or self.s.trial_time_s))
        except (ChildGone, ChildTimeout) as e:
            raise HarnessFault(
                f"the reference process failed at {cmd['cmd']}: {type(e).__name__} {e}"
            ) from None
        if not reply["ok"]:
            raise HarnessFault(f"the reference failed at {cmd['cmd']}: {str(reply.get('error'))[-2000:]}")
        return reply, blob

    def _cand(self, cmd: dict[str, Any], cap: float | None = None) -> tuple[dict[str, Any], bytes]:
        try:
            reply, blob = self.cand.ask(cmd, self._left(cap or self.s.trial_time_s))
        except ChildTimeout:
            raise CandidateFault(
                Status.TIMEOUT, f"the candidate did not answer {cmd['cmd']} in time"
            ) from None
        except ChildGone as e:
            raise CandidateFault(
                Status.RUNTIME_ERROR, f"the candidate's process ended or broke the protocol: {e}"
            ) from None
        if not reply["ok"]:
            kind = str(reply.get("kind"))
            error = str(reply.get("error"))[-4000:]
            if kind == "bad_output":
                raise CandidateFault(Status.WRONG_ANSWER, error, hack="bad_output")
            extra = {"cuda_error": True} if kind == "cuda" else {}
            raise CandidateFault(Status.RUNTIME_ERROR, error, **extra)
        return reply, blob

    # -- the request -------------------------------------------------------------------------

    def run(self) -> StageOutput:
        modules = _modules(self.inp)
        common = {
            **child_files("run_child.py", "callkey.py"),
            "reference.py": self.p.original_model_src.encode(),
        }
        cand_files = {**common, "candidate.py": (self.p.custom_model_src or "").encode()}
        cand_files.update({m["file"]: m["data"] for m in modules})
        shipped = [{k: m[k] for k in ("key", "module", "file")} for m in modules]
        with ExitStack() as stack:
            self.ref = self._start(stack, common)
            self.cand = self._start(stack, cand_files)
            seed = secrets.randbits(31)
            init = {
                "cmd": "init",
                "device": self.p.device,
                "precision": self.p.precision,
                "seed": seed,
                "threads": self.s.threads,
            }
            # both import torch and build their models at once
            self.ref.send({**init, "role": "reference"})
            self.cand.send({**init, "role": "candidate", "modules": shipped})
            started = self._left(self.s.startup_time_s)
            try:
                ref_init, _ = self.ref.recv(time.monotonic() + started)
            except (ChildGone, ChildTimeout) as e:
                raise HarnessFault(f"the reference process did not start: {type(e).__name__} {e}") from None
            if not ref_init["ok"]:
                raise HarnessFault(f"the reference failed to build: {str(ref_init.get('error'))[-2000:]}")
            self.report.versions = dict(ref_init.get("versions") or {})
            try:
                cand_init, _ = self.cand.recv(time.monotonic() + self._left(self.s.startup_time_s))
            except ChildTimeout:
                raise CandidateFault(Status.TIMEOUT, "the candidate did not load in time") from None
            except ChildGone as e:
                raise CandidateFault(
                    Status.RUNTIME_ERROR, f"the candidate's process ended while loading: {e}"
                ) from None
            if not cand_init["ok"]:
                raise CandidateFault(Status.RUNTIME_ERROR, str(cand_init.get("error"))[-4000:])
            for _ in range(self.p.num_correct_trials):
                self.correctness_trial()
            timing = self.time_both() if self.p.measure_performance else None
            self.correctness_trial(after_timing=True)
            if self.p.device == "cuda":
                self.check_profile()
            return self.result(timing)

    def correctness_trial(self, *, after_timing: bool = False) -> None:
        s = secrets.randbits(31)
        ref_reply, ref_blob = self._ref({"cmd": "trial", "seed": s})
        cand_reply, cand_blob = self._cand({"cmd": "trial", "seed": s})
        try:
            ref_out = decode(ref_reply.get("tensors"), ref_blob)
        except BadTensors as e:
            raise HarnessFault(f"the reference's outputs: {e}") from None
        try:
            cand_out = decode(cand_reply.get("tensors"), cand_blob)
        except BadTensors as e:
            raise CandidateFault(Status.WRONG_ANSWER, f"the candidate's outputs: {e}") from None
        if not cand_reply.get("calls"):
            raise CandidateFault(
                Status.WRONG_ANSWER,
                "the custom kernel never ran: ModelNew.forward called nothing of the built extension",
                hack="kernel_not_called",
            )
        c = compare(ref_out, cand_out, self.p.atol, self.p.rtol)
        if not after_timing:
            self.report.max_difference.append(c.max_difference)
            self.report.avg_difference.append(c.avg_difference)
        if not c.ok:
            when = "after timing (results differ from the first calls')" if after_timing else ""
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"output mismatch {when}: {c.issue}".replace("  ", " "),
                max_difference=f"{c.max_difference:.6g}",
                avg_difference=f"{c.avg_difference:.6g}",
            )
        if not after_timing:
            self.report.passed += 1

    def _timed(self, which: str, seed: int, ab: tuple[int, int]) -> tuple[Call, dict[str, Any]]:
        a, b = ab
        ask = self._ref if which == "ref" else self._cand
        ask({"cmd": "prep", "seed": seed, "a": a, "b": b, "p": DIGEST_PRIME})
        t0 = time.perf_counter_ns()
        reply, _ = ask({"cmd": "go"})
        outer = (time.perf_counter_ns() - t0) / 1e6
        inner = reply.get("inner_ms")
        inner_ms = float(inner) if isinstance(inner, (int, float)) and not isinstance(inner, bool) else -1.0
        return Call(inner_ms, outer), reply

    def time_both(self) -> dict[str, Any]:
        """Alternating timed calls; every candidate call's digest checked against the reference's."""
        n = self.p.num_perf_trials + 1
        spot = set(secrets.SystemRandom().sample(range(n), min(self.s.spot_checks, n)))
        for _ in range(WARMUP):
            s, ab = secrets.randbits(31), _weights()
            self._timed("ref", s, ab)
            self._timed("cand", s, ab)
        threads_ref = self._ref({"cmd": "threads"})[0].get("threads")
        ref_calls: list[Call] = []
        cand_calls: list[Call] = []
        for k in range(n):
            s, ab = secrets.randbits(31), _weights()  # the same inputs and weights for both
            rc, rr = self._timed("ref", s, ab)
            cc, cr = self._timed("cand", s, ab)
            ref_calls.append(rc)
            cand_calls.append(cc)
            self.check_digest(k, cr, rr)
            if k in spot:
                self.spot_check(k, cr, ab)
        threads_cand = self._cand({"cmd": "threads"})[0].get("threads")
        if isinstance(threads_ref, int) and isinstance(threads_cand, int) and threads_cand > threads_ref > 0:
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"the candidate runs {threads_cand} threads where the reference runs {threads_ref}",
                hack="extra_threads",
            )
        charged = charge(ref_calls[1:], cand_calls[1:])
        if charged.hidden:
            self.report.flags.append(
                {
                    "check": "time_outside_events",
                    "why": "the candidate's calls took longer on the host's clock than its own timing said, "
                    "beyond the reference's round trip; charged the host's time",
                }
            )
        return {"ref_ms": charged.ref_ms, "cand_ms": charged.cand_ms, "overhead_ms": charged.overhead_ms}

    def check_digest(self, k: int, cand: dict[str, Any], ref: dict[str, Any]) -> None:
        if not cand.get("calls"):
            raise CandidateFault(
                Status.WRONG_ANSWER, "the custom kernel never ran in a timed call", hack="kernel_not_called"
            )
        cd, rd = cand.get("digest"), ref.get("digest")
        rs, rn = ref.get("scale"), ref.get("numel")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cd, rd, rs, rn)):
            raise CandidateFault(Status.WRONG_ANSWER, f"timed call {k}: no valid digest", hack="digest")
        if not digest_agrees(float(cd), float(rd), float(rs), int(rn), self.p.atol, self.p.rtol):  # type: ignore[arg-type]
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"timed call {k}: the outputs differ from the reference's for the same inputs "
                "(results cached across calls, or work not finished when the call returned)",
                hack="timed_output_mismatch",
            )

    def spot_check(self, k: int, timed: dict[str, Any], ab: tuple[int, int]) -> None:
        """The full outputs of a timed call: its digest must be theirs, and they must match."""
        ref_reply, ref_blob = self._ref({"cmd": "output"})
        cand_reply, cand_blob = self._cand({"cmd": "output"})
        try:
            cand_out = decode(cand_reply.get("tensors"), cand_blob)
            ref_out = decode(ref_reply.get("tensors"), ref_blob)
        except BadTensors as e:
            raise CandidateFault(Status.WRONG_ANSWER, f"timed call {k}: outputs unreadable: {e}") from None
        if not digest_matches(digest(cand_out, ab[0], ab[1], DIGEST_PRIME), timed.get("digest"), cand_out):
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"timed call {k}: the digest it reported is not the digest of its outputs",
                hack="forged_digest",
            )
        c = compare(ref_out, cand_out, self.p.atol, self.p.rtol)
        if not c.ok:
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"timed call {k}: output mismatch: {c.issue}",
                hack="timed_output_mismatch",
            )

    def check_profile(self) -> None:
        names = _json_list(self.inp, "kernel_names")
        reply, _ = self._cand({"cmd": "profile"}, cap=60.0)
        launched = [str(n) for n in reply.get("kernels") or []]
        if names and not any(any(k in n for n in launched) for k in names):
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"none of the candidate's kernels ({', '.join(names[:5])}) ran in a profiled call",
                hack="kernel_not_in_profile",
                kernels_launched=launched[:20],
            )

    def ref_key(self) -> str:
        v = self.report.versions
        parts = [
            hashlib.sha256(self.p.original_model_src.encode()).hexdigest(),
            self.p.precision,
            self.p.device,
            v.get("gpu", "cpu"),
            v.get("torch"),
            self.p.num_perf_trials,
        ]
        return json.dumps(parts)

    def result(self, timing: dict[str, Any] | None) -> StageOutput:
        p, v = self.p, self.report.versions
        hardware = str(v.get("gpu", "cpu"))
        metadata: dict[str, Any] = {
            "correctness_trials": f"({self.report.passed} / {p.num_correct_trials})",
            "max_difference": [f"{d:.6g}" for d in self.report.max_difference],
            "avg_difference": [f"{d:.6g}" for d in self.report.avg_difference],
            "hardware": hardware,
            "device": p.device,
            "atol": p.atol,
            "rtol": p.rtol,
            "precision": p.precision,
        }
        detail: dict[str, Any] = {"compiled": True, "correctness": True, "runtime": -1.0, "ref_runtime": -1.0}
        speedup = None
        if timing is not None:
            cand_stats = stats(timing["cand_ms"], hardware, p.device)
            key = self.ref_key()
            ref_stats = stats(timing["ref_ms"], hardware, p.device)
            cached = self.h.ref_times.get(key)
            if cached is None:
                self.h.ref_times.put(key, ref_stats)
            else:  # one reference time per problem, GPU model and torch: a group's speedups share it
                metadata["ref_runtime_this_request"] = ref_stats
                ref_stats = cached
            runtime, ref_runtime = float(cand_stats["mean"]), float(ref_stats["mean"])  # type: ignore[arg-type]
            speedup = ref_runtime / runtime if runtime > 0 else None
            detail.update(
                runtime=runtime,
                ref_runtime=ref_runtime,
                runtime_stats=cand_stats,
                ref_runtime_stats=ref_stats,
            )
            metadata["timing_overhead_ms"] = round(timing["overhead_ms"], 4)
            metadata["ref_runtime_cached"] = cached is not None
            if speedup is not None and speedup > self.s.excessive_speedup:
                metadata["excessive_speedup"] = True
                self.report.flags.append(
                    {
                        "check": "excessive_speedup",
                        "why": f"speedup {speedup:.2f} exceeds {self.s.excessive_speedup:g}",
                    }
                )
        value = score(p.reward, Outcome(Stage.CORRECT, speedup), p.speedup_cap)
        if p.device == "cuda":  # timing on a MIG slice or a time-shared GPU says so
            self.report.flags.extend({"check": f["flag"], "why": f["why"]} for f in timing_flags())
        return StageOutput.final(
            Status.OK,
            value,
            **detail,
            metadata=metadata,
            speedup=speedup,
            flags=self.report.flags,
            versions=v,
            outcome=Stage.CORRECT.value,
            reward=p.reward,
        )
