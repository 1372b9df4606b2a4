"""One request at the ``kernelbench`` execute stage, judged: the reference and the candidate
driven trial by trial in their jailed processes (``in_jail/judge_process.py``), every seed and
verdict on this side (the stage and its handler: ``execute.py``).

1. Correctness: ``num_correct_trials`` trials, each with a fresh secret seed; outputs must be
   plain tensors on the device, not aliasing inputs, of the reference's shapes, and allclose.
   The candidate's extension must have been called (its calls are counted). After the first
   reference trial the host checks that the candidate can get what the reference needed
   (``memory_plan.py``); a problem too large for the worker is ``internal_error``.
2. Timing (``measure_performance``): 3 warm-up calls each, then ``num_perf_trials`` + 1 timed
   calls (the first dropped), alternating reference and candidate with the same fresh seed per
   call, inputs made anew on the device before each, the L2 flushed (cuda), a device-wide sync
   and a digest of the outputs inside the timed window. Every candidate digest must agree with
   the reference's for that seed, and ``spot_checks`` random calls are compared in full (and
   their reported digests recomputed by the reference). Extra threads are a hack.
3. A last correctness trial after timing (results cached across calls fail it); on a GPU, the
   profiler must show a kernel of the candidate's own sources where it saw any kernel at all.

Whose each fault is, and the result a candidate's ends in: ``faults.py``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import secrets
import threading
import time
from collections import OrderedDict
from contextlib import ExitStack
from typing import Any, Protocol

from distrs.core.model import Status
from distrs.rewards.base import MiB, StageInput, StageOutput, stage_budget
from distrs.rewards.gpu_env import timing_flags
from distrs.rewards.kernelbench.compare import (
    BadTensors,
    Chunk,
    OutputMeta,
    Tally,
    check_meta,
    digest_matches,
    parse_meta,
    plan_chunks,
)
from distrs.rewards.kernelbench.compile import MODULES
from distrs.rewards.kernelbench.faults import CandidateFault, HarnessFault, Report
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.in_jail import CALLKEY, JUDGE_PROCESS, TENSORS, programs
from distrs.rewards.kernelbench.jailed import ChildGone, ChildTimeout
from distrs.rewards.kernelbench.memory_plan import gib, misfit
from distrs.rewards.kernelbench.payload import KernelPayload
from distrs.rewards.kernelbench.proof import kernel_ran
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.timing import Call, charge, digest_agrees, stats
from distrs.rewards.kernelbench.window import OutputWindow

WARMUP = 3
DIGEST_PRIME = 2_147_483_629  # weights ((i*a + b) mod p) / p; a, b drawn per call
REF_CACHE_ITEMS = 1024
CAND_SLACK = 10.0  # a candidate step may take this many times the reference's same step
CHILD_FILES = (JUDGE_PROCESS, CALLKEY, TENSORS)


class Child(Protocol):
    """A judging process as the judge drives it (``jailed.JailedChild``)."""

    def send(self, cmd: dict[str, Any]) -> None: ...

    def recv(self, deadline: float) -> tuple[dict[str, Any], bytes]: ...

    def close(self) -> None: ...


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


def json_list(inp: StageInput, name: str) -> list[Any]:
    try:
        v = json.loads(inp.artifacts.get(name) or "[]")
    except ValueError:
        return []
    return v if isinstance(v, list) else []


def _weights() -> tuple[int, int]:
    """(a, b) of a timed call's digest weights, drawn by the host."""
    return secrets.randbelow(DIGEST_PRIME - 1) + 1, secrets.randbelow(DIGEST_PRIME)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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


class Host(Protocol):
    """What the judge asks of the stage's handler (``execute.ExecuteHandler``)."""

    ref_times: RefTimes

    @property
    def settings(self) -> KernelSettings: ...

    def start_child(
        self, stack: ExitStack, files: dict[str, bytes], device: str, fds: tuple[int, ...]
    ) -> Child:
        """One judging process in a fresh jailed session holding ``files``."""
        ...


class Judge:
    """One request's judging: two jailed processes, every seed and verdict on this side."""

    def __init__(self, handler: Host, inp: StageInput, p: KernelPayload, report: Report) -> None:
        self.h = handler
        self.s = handler.settings
        self.inp = inp
        self.p = p
        self.report = report
        self.deadline = time.monotonic() + stage_budget(inp)
        self.spent = {"ref": 0.0, "cand": 0.0}  # seconds each side took to answer
        self.ref_took: dict[str, float] = {}  # the reference's last reply time per command
        self.inputs_where = "auto"
        self.ref_meta: list[OutputMeta] = []
        self.ref_peak = 0

    # -- the two processes -----------------------------------------------------------------

    def _allowance(self, cap: float) -> tuple[float, bool]:
        """(seconds for one reply, whether the stage's budget rather than ``cap`` sets it)."""
        left = self.deadline - time.monotonic()
        return (max(0.05, min(cap, left)), left < cap)

    def _cap(self, who: str, what: str, cap: float | None) -> float:
        """A reply's own limit: the reference's only the stage's budget (its slowness is the
        problem's, not the candidate's); the candidate's ``trial_time_s``, or ten times what
        the reference took for the same step where that is longer (a large problem on a slow
        device takes long for both)."""
        if cap is not None:
            return cap
        if who == "ref":
            return math.inf
        return max(self.s.trial_time_s, CAND_SLACK * self.ref_took.get(what.split()[0], 0.0))

    def _reply(self, who: str, child: Child, what: str, cap: float | None) -> dict[str, Any]:
        allowance, by_budget = self._allowance(self._cap(who, what, cap))
        t0 = time.monotonic()
        try:
            reply, _ = child.recv(t0 + allowance)
        except ChildTimeout:
            self.spent[who] += time.monotonic() - t0
            if who == "ref":
                raise HarnessFault(f"the reference process did not answer {what} in time") from None
            if by_budget and self.spent["cand"] <= self.spent["ref"]:
                raise HarnessFault(
                    f"the stage's time budget ran out at the candidate's {what}: the reference took "
                    f"{self.spent['ref']:.1f} s of it, the candidate {self.spent['cand']:.1f} s"
                ) from None
            raise CandidateFault(Status.TIMEOUT, f"the candidate did not answer {what} in time") from None
        except ChildGone as e:
            if who == "ref":
                raise HarnessFault(f"the reference process failed at {what}: {e}") from None
            raise CandidateFault(
                Status.RUNTIME_ERROR, f"the candidate's process ended or broke the protocol: {e}"
            ) from None
        took = time.monotonic() - t0
        self.spent[who] += took
        if who == "ref":
            self.ref_took[what.split()[0]] = took
        return reply

    def _send(self, who: str, cmd: dict[str, Any]) -> None:
        child = self.ref if who == "ref" else self.cand
        try:
            child.send(cmd)
        except ChildGone as e:
            if who == "ref":
                raise HarnessFault(f"the reference process failed at {cmd['cmd']}: {e}") from None
            raise CandidateFault(
                Status.RUNTIME_ERROR, f"the candidate's process ended or broke the protocol: {e}"
            ) from None

    def _ref_reply(self, what: str, cap: float | None = None) -> dict[str, Any]:
        reply = self._reply("ref", self.ref, what, cap)
        if not reply["ok"]:
            error = str(reply.get("error"))[-2000:]
            if reply.get("kind") == "memory":
                raise HarnessFault(
                    f"the reference ran out of memory at {what}: the problem is too large for this worker: {error}"
                )
            raise HarnessFault(f"the reference failed at {what}: {error}")
        return reply

    def _cand_reply(self, what: str, cap: float | None = None) -> dict[str, Any]:
        reply = self._reply("cand", self.cand, what, cap)
        if not reply["ok"]:
            kind = str(reply.get("kind"))
            error = str(reply.get("error"))[-4000:]
            if kind == "bad_output":
                raise CandidateFault(Status.WRONG_ANSWER, error, hack="bad_output")
            if kind == "memory":
                raise CandidateFault(
                    Status.RUNTIME_ERROR,
                    f"out of memory: the candidate needed more than the reference's {gib(self.ref_peak)}, "
                    f"with as much again free for it: {error}",
                    out_of_memory=True,
                )
            extra = {"cuda_error": True} if kind == "cuda" else {}
            raise CandidateFault(Status.RUNTIME_ERROR, error, **extra)
        return reply

    def _ref(self, cmd: dict[str, Any], cap: float | None = None) -> dict[str, Any]:
        self._send("ref", cmd)
        return self._ref_reply(cmd["cmd"], cap)

    def _cand(self, cmd: dict[str, Any], cap: float | None = None) -> dict[str, Any]:
        self._send("cand", cmd)
        return self._cand_reply(cmd["cmd"], cap)

    # -- the request -------------------------------------------------------------------------

    def run(self) -> StageOutput:
        modules = _modules(self.inp)
        common = {**programs(*CHILD_FILES), "reference.py": self.p.original_model_src.encode()}
        cand_files = {**common, "candidate.py": (self.p.custom_model_src or "").encode()}
        cand_files.update({m["file"]: m["data"] for m in modules})
        shipped = [{k: m[k] for k in ("key", "module", "file")} for m in modules]
        with ExitStack() as stack:
            try:
                self.window = OutputWindow.create(self.s.window_slot_mb * MiB)
            except OSError as e:
                raise HarnessFault(f"cannot create the output window: {e}") from None
            stack.callback(self.window.close)
            self.ref = self.h.start_child(stack, common, self.p.device, (self.window.ro_fd,))
            self.cand = self.h.start_child(stack, cand_files, self.p.device, (self.window.rw_fd,))
            self.start_both(shipped)
            for _ in range(self.p.num_correct_trials):
                self.correctness_trial()
            timing = self.time_both() if self.p.measure_performance else None
            self.correctness_trial(after_timing=True)
            if self.p.device == "cuda":
                self.check_kernel_ran()
            return self.result(timing)

    def start_both(self, shipped: list[dict[str, str]]) -> None:
        """Both processes set up the harness (``init``: torch, the device, the window) at once,
        then build their models (``load``). No code of the problem or the candidate has run when
        ``init`` answers, so the candidate's ``init`` failing is the service's fault too."""
        init = {
            "cmd": "init",
            "device": self.p.device,
            "precision": self.p.precision,
            "threads": self.s.threads,
        }
        window = {"size": self.window.size, "slot_bytes": self.window.slot_bytes}
        self._send("ref", {**init, "role": "reference", "window": {**window, "fd": self.window.ro_fd}})
        self._send("cand", {**init, "role": "candidate", "window": {**window, "fd": self.window.rw_fd}})
        ref_init = self._ref_reply("init (the judging process's setup)", self.s.startup_time_s)
        self.report.versions = dict(ref_init.get("versions") or {})
        try:
            cand_init = self._reply("cand", self.cand, "init", self.s.startup_time_s)
        except CandidateFault as e:
            raise HarnessFault(f"the candidate's judging process could not start: {e.reason}") from None
        if not cand_init["ok"]:
            error = str(cand_init.get("error"))[-2000:]
            raise HarnessFault(f"the candidate's judging process could not start: {error}")
        seed = secrets.randbits(31)
        self._send("ref", {"cmd": "load", "seed": seed})
        self._send("cand", {"cmd": "load", "seed": seed, "modules": shipped})
        self._ref_reply("load (building the reference)", self.s.startup_time_s)
        self._cand_reply("load (loading the candidate)", self.s.startup_time_s)

    def plan_memory(self, ref_reply: dict[str, Any]) -> None:
        """After the reference's first trial: the candidate can get what the reference needed."""
        peak = ref_reply.get("peak_bytes")
        if not isinstance(peak, int) or isinstance(peak, bool) or peak < 0:
            raise HarnessFault("the reference did not report its memory peak")
        self.ref_peak = peak
        mem = self._ref({"cmd": "memory"})
        free, total = mem.get("free"), mem.get("total")
        if not isinstance(free, int) or not isinstance(total, int):
            raise HarnessFault("the reference did not report the device's memory")
        why = misfit(self.p.device, peak, free, total, self.window.slot_bytes)
        if why is not None:
            raise HarnessFault(why)

    def _ref_outputs(self, reply: dict[str, Any]) -> list[OutputMeta]:
        try:
            return parse_meta(reply.get("tensors"))
        except BadTensors as e:
            raise HarnessFault(f"the reference's outputs: {e}") from None

    def _cand_outputs(self, reply: dict[str, Any], when: str = "") -> list[OutputMeta]:
        try:
            meta = parse_meta(reply.get("tensors"))
        except BadTensors as e:
            raise CandidateFault(Status.WRONG_ANSWER, f"{when}the candidate's outputs: {e}") from None
        issue = check_meta(self.ref_meta, meta)
        if issue is not None:
            raise CandidateFault(Status.WRONG_ANSWER, f"{when}output mismatch: {issue}")
        return meta

    def correctness_trial(self, *, after_timing: bool = False) -> None:
        s = secrets.randbits(31)
        first = not self.ref_meta
        ref_reply = self._ref({"cmd": "trial", "seed": s, "inputs": self.inputs_where})
        self.ref_meta = self._ref_outputs(ref_reply)
        if first:
            where = ref_reply.get("inputs")
            if where not in ("device", "host"):
                raise HarnessFault(f"the reference made its inputs {where!r}")
            self.inputs_where = str(where)
            self.plan_memory(ref_reply)
        cand_reply = self._cand({"cmd": "trial", "seed": s, "inputs": self.inputs_where})
        if not cand_reply.get("calls"):
            raise CandidateFault(
                Status.WRONG_ANSWER,
                "the custom kernel never ran: ModelNew.forward called nothing of the built extension",
                hack="kernel_not_called",
            )
        cand_meta = self._cand_outputs(cand_reply)
        c = self.compare_outputs(cand_meta).result()
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

    def compare_outputs(self, cand_meta: list[OutputMeta], ab: tuple[int, int] | None = None) -> Tally:
        """The candidate's kept outputs against the reference's, chunk by chunk through the
        window: the candidate fills one slot while the reference compares the other."""
        chunks = plan_chunks(cand_meta, self.window.slot_bytes)
        tally = Tally(cand_meta)
        if not chunks:
            return tally
        extra: dict[str, Any] = {"atol": self.p.atol, "rtol": self.p.rtol}
        if ab is not None:
            extra.update(a=ab[0], b=ab[1], p=DIGEST_PRIME)
        self._put(chunks[0], 0)
        for j, ch in enumerate(chunks):
            nxt = chunks[j + 1] if j + 1 < len(chunks) else None
            if nxt is not None:
                self._send("cand", {"cmd": "put", **nxt.command((j + 1) % 2)})
            stats = self._ref({"cmd": "cmp", **ch.command(j % 2), "dtype": cand_meta[ch.out].dtype, **extra})
            try:
                tally.add(ch, stats)
            except ValueError as e:
                raise HarnessFault(f"the reference's comparison: {e}") from None
            if nxt is not None:
                self._put_reply(nxt)
        return tally

    def _put(self, ch: Chunk, slot: int) -> None:
        self._send("cand", {"cmd": "put", **ch.command(slot)})
        self._put_reply(ch)

    def _put_reply(self, ch: Chunk) -> None:
        reply = self._cand_reply("put (handing over its outputs)")
        if not _number(reply.get("copied")) or (reply["copied"] <= 0 and ch.count > 0):
            raise CandidateFault(Status.WRONG_ANSWER, "the candidate did not hand over its outputs")

    def _timed(self, who: str, seed: int, ab: tuple[int, int]) -> tuple[Call, dict[str, Any]]:
        a, b = ab
        ask = self._ref if who == "ref" else self._cand
        ask({"cmd": "prep", "seed": seed, "a": a, "b": b, "p": DIGEST_PRIME, "inputs": self.inputs_where})
        t0 = time.perf_counter_ns()
        reply = ask({"cmd": "go"})
        outer = (time.perf_counter_ns() - t0) / 1e6
        if self.p.device == "cuda":  # its dropped inputs back to the device before the other's turn
            ask({"cmd": "trim"})
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
        threads_ref = self._ref({"cmd": "threads"}).get("threads")
        ref_calls: list[Call] = []
        cand_calls: list[Call] = []
        for k in range(n):
            s, ab = secrets.randbits(31), _weights()  # the same inputs and weights for both
            rc, rr = self._timed("ref", s, ab)
            cc, cr = self._timed("cand", s, ab)
            ref_calls.append(rc)
            cand_calls.append(cc)
            self.ref_meta = self._ref_outputs(rr)
            cand_meta = self._cand_outputs(cr, f"timed call {k}: ")
            self.check_digest(k, cr, rr)
            if k in spot:
                self.spot_check(k, cr, cand_meta, ab)
        threads_cand = self._cand({"cmd": "threads"}).get("threads")
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
        if not all(_number(v) for v in (rd, rs, rn)):
            raise HarnessFault(f"timed call {k}: the reference reported no valid digest")
        if not _number(cd):
            raise CandidateFault(Status.WRONG_ANSWER, f"timed call {k}: no valid digest", hack="digest")
        if not digest_agrees(float(cd), float(rd), float(rs), int(rn), self.p.atol, self.p.rtol):  # type: ignore[arg-type]
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"timed call {k}: the outputs differ from the reference's for the same inputs "
                "(results cached across calls, or work not finished when the call returned)",
                hack="timed_output_mismatch",
            )

    def spot_check(
        self, k: int, timed: dict[str, Any], cand_meta: list[OutputMeta], ab: tuple[int, int]
    ) -> None:
        """A timed call's full outputs: they must match, and its digest must be theirs."""
        when = f"timed call {k}: "
        tally = self.compare_outputs(cand_meta, ab)
        c = tally.result()
        if not c.ok:
            raise CandidateFault(
                Status.WRONG_ANSWER, f"{when}output mismatch: {c.issue}", hack="timed_output_mismatch"
            )
        if not digest_matches(tally.digest, timed.get("digest"), tally.scale):
            raise CandidateFault(
                Status.WRONG_ANSWER,
                f"{when}the digest it reported is not the digest of its outputs",
                hack="forged_digest",
            )

    def check_kernel_ran(self) -> None:
        """One profiled forward of the candidate (``proof.py``): a verdict only where the
        profiler saw kernels and none was the candidate's; a profiler that fails or sees
        nothing is the service's tool failing, flagged."""
        names = [str(n) for n in json_list(self.inp, "kernel_names")]
        self._send("cand", {"cmd": "profile"})
        reply = self._reply("cand", self.cand, "profile", 60.0)
        if not reply["ok"] and reply.get("kind") != "profiler":
            self._cand_fault_of(reply)
        verdict = kernel_ran(names, reply)
        if verdict.flag is not None:
            self.report.flags.append(verdict.flag)
        if verdict.decoy is not None:
            raise CandidateFault(
                Status.WRONG_ANSWER,
                verdict.decoy,
                hack="kernel_not_in_profile",
                kernels_launched=verdict.launched[:20],
            )

    def _cand_fault_of(self, reply: dict[str, Any]) -> None:
        kind = str(reply.get("kind"))
        extra = {"cuda_error": True} if kind == "cuda" else {}
        raise CandidateFault(Status.RUNTIME_ERROR, str(reply.get("error"))[-4000:], **extra)

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
            "inputs_made_on": self.inputs_where,
            "reference_peak_bytes": self.ref_peak,
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
