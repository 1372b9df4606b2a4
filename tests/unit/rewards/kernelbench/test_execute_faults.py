"""Whose fault it is, at the execute stage: each failure of the service's own machinery injected
into the judge, which must end ``internal_error`` or a flag, never a candidate verdict; and the
candidate's own failures, which must stay its verdict.

The two judging processes are scripted stand-ins for ``judge_process.py`` behind the judge's own
``Child`` wrapper (``ExecuteHandler.start_child``): what each answers to each command, or that it
stalls, dies or runs out of memory. The real processes are exercised by the kernel tier
(``tests/integration/rewards/kernelbench``); here every fault can be placed exactly.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.kernelbench import request_judge
from distrs.rewards.kernelbench.execute import ExecuteHandler
from distrs.rewards.kernelbench.jailed import ChildGone, ChildTimeout
from distrs.rewards.kernelbench.payload import parse_payload
from distrs.rewards.kernelbench.settings import KernelSettings

GiB = 1 << 30
N = 64
DIGEST = 123.25

Reply = dict[str, Any] | BaseException
Script = Callable[[str, dict[str, Any]], Reply | None]  # (role, command) -> override or None


def honest(role: str, cmd: dict[str, Any]) -> Reply:
    """What an honest pair of processes answers (a 64-element float32 output, bit-identical)."""
    name = cmd["cmd"]
    meta = [{"dtype": "float32", "shape": [N], "numel": N}]
    if name == "init":
        return {"ok": True, "versions": {"torch": "2.x", "gpu": "Fake GPU"}}
    if name == "trial":
        return {"ok": True, "tensors": meta, "calls": 1, "inputs": "device", "peak_bytes": 1 << 20}
    if name == "memory":
        return {"ok": True, "free": 60 * GiB, "total": 80 * GiB, "peak_bytes": 1 << 20}
    if name == "put":
        return {"ok": True, "copied": cmd["count"] * 4}
    if name == "cmp":
        stats = {"ok": True, "bad": 0, "n": cmd["count"], "max": 0.0, "sum": 0.0, "finite": cmd["count"]}
        stats["nonfinite"] = 0
        if "a" in cmd:
            stats.update(digest=DIGEST, scale=200.0)
        return stats
    if name in ("prep", "trim", "load"):
        return {"ok": True}
    if name == "go":
        return {
            "ok": True,
            "tensors": meta,
            "digest": DIGEST,
            "scale": 200.0,
            "numel": N,
            "inner_ms": 1.0,
            "calls": 1,
        }
    if name == "threads":
        return {"ok": True, "threads": 3}
    if name == "profile":
        return {"ok": True, "kernels": ["add_relu_kernel(float const*, float*, long)", "elementwise_kernel"]}
    raise AssertionError(f"unexpected command {name}")


class FakeChild:
    """A judging process that answers from a script (``request_judge.Child``)."""

    def __init__(self, role: str, script: Script, log: list[tuple[str, str]]) -> None:
        self.role = role
        self.script = script
        self.log = log
        self.pending: list[tuple[Reply, float]] = []

    def send(self, cmd: dict[str, Any]) -> None:
        self.log.append((self.role, cmd["cmd"]))
        got = self.script(self.role, cmd)
        reply = honest(self.role, cmd) if got is None else got
        delay = 0.0
        if isinstance(reply, dict) and "_sleep" in reply:
            delay = reply.pop("_sleep")
        self.pending.append((reply, delay))

    def recv(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        reply, delay = self.pending.pop(0)
        if delay:
            time.sleep(delay)
        if isinstance(reply, BaseException):
            raise reply
        return reply, b""

    def close(self) -> None:
        pass


class ScriptedHandler(ExecuteHandler):
    def __init__(self, script: Script) -> None:
        super().__init__(settings=KernelSettings(device="cuda", trial_time_s=5.0))
        self.script = script
        self.log: list[tuple[str, str]] = []

    def start_child(self, stack: ExitStack, files: dict[str, bytes], device: str, fds: tuple[int, ...]):  # type: ignore[no-untyped-def,override]
        role = "cand" if "candidate.py" in files else "ref"
        return FakeChild(role, self.script, self.log)


MODULES = json.dumps([{"key": "k", "module": "m", "data": base64.b64encode(b"\x7fELF").decode()}])
ARTIFACTS = {"kernel_modules": MODULES, "kernel_names": json.dumps(["add_relu_kernel"])}


def judge(
    script: Script, artifacts: dict[str, str] | None = None, timeout_s: float = 600.0, **kw: Any
) -> StageOutput:
    payload = {
        "original_model_src": "class Model: ...",
        "custom_model_src": "class ModelNew: ...",
        "backend": "cuda",
        "num_perf_trials": 4,
        **kw,
    }
    inp = StageInput(
        "r", "t", "kernelbench", "execute", payload, ARTIFACTS if artifacts is None else artifacts, timeout_s
    )
    return ScriptedHandler(script).judge(inp, parse_payload(payload))


def on(role: str, name: str, reply: Reply, *, after: int = 0) -> Script:
    """A script that answers ``reply`` to the ``after``-th (0-based) ``name`` sent to ``role``."""
    seen = {"n": 0}

    def script(r: str, cmd: dict[str, Any]) -> Reply | None:
        if r == role and cmd["cmd"] == name:
            seen["n"] += 1
            if seen["n"] == after + 1:
                return reply
        return None

    return script


def test_an_honest_pair_is_ok_and_compares_through_the_window() -> None:
    out = judge(lambda r, c: None)
    assert out.status is Status.OK, out.detail
    assert out.detail["metadata"]["correctness_trials"] == "(5 / 5)"
    assert out.detail["metadata"]["inputs_made_on"] == "device"
    assert not [f for f in out.detail["flags"] if f["check"] == "kernel_ran_unverified"]


# -- the service's faults: internal_error or a flag, never the candidate's verdict ------------


@pytest.mark.parametrize(
    ("script", "says"),
    [
        (on("ref", "trial", {"ok": False, "kind": "runtime", "error": "reference broke"}), "reference broke"),
        (on("ref", "trial", ChildTimeout(), after=2), "did not answer trial in time"),
        (on("ref", "cmp", ChildGone("the process exited"), after=3), "the reference process failed at cmp"),
        (on("ref", "init", ChildGone("the process exited")), "reference process failed"),
        (
            on("ref", "load", {"ok": False, "kind": "runtime", "error": "no Model"}),
            "the reference failed at load",
        ),
        (on("cand", "init", {"ok": False, "kind": "runtime", "error": "mmap: bad fd"}), "could not start: "),
        (on("cand", "init", ChildTimeout()), "could not start"),
        (on("cand", "init", ChildGone("the process exited")), "could not start"),
        (
            on("ref", "trial", {"ok": False, "kind": "memory", "error": "CUDA out of memory"}),
            "ran out of memory",
        ),
        (
            on("ref", "go", {"ok": False, "kind": "runtime", "error": "boom"}, after=5),
            "the reference failed at go",
        ),
        (on("ref", "cmp", {"ok": True, "bad": 0, "n": 1}), "the reference's comparison"),
        (
            on("ref", "trial", {"ok": True, "tensors": "6 GiB", "calls": 1, "inputs": "device"}),
            "the reference's outputs",
        ),
        (on("ref", "trial", ChildGone("an oversized reply line")), "oversized reply line"),
        (on("ref", "memory", {"ok": True, "free": 10 * GiB, "total": 80 * GiB}), "does not fit the GPU"),
        (
            on(
                "ref",
                "go",
                {"ok": True, "tensors": [{"dtype": "float32", "shape": [N], "numel": N}]},
                after=4,
            ),
            "reported no valid digest",
        ),
    ],
)
def test_a_fault_of_the_reference_or_the_harness_is_internal_error(script: Script, says: str) -> None:
    def with_peak(r: str, c: dict[str, Any]) -> Reply | None:
        got = script(r, c)
        if got is None and r == "ref" and c["cmd"] == "trial" and "does not fit" in says:
            return {**honest(r, c), "peak_bytes": 40 * GiB}  # twice this cannot fit 80 GiB less 10 free
        return got

    out = judge(with_peak)
    assert out.status is Status.INTERNAL_ERROR, out.detail
    assert says in out.detail["error"], out.detail["error"]
    assert out.score == 0.0


def test_a_missing_artifact_is_internal_error() -> None:
    out = judge(lambda r, c: None, artifacts={})
    assert out.status is Status.INTERNAL_ERROR and "kernel_modules" in out.detail["error"]


def test_no_output_window_is_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(request_judge.OutputWindow, "create", refuse)
    out = judge(lambda r, c: None)
    assert out.status is Status.INTERNAL_ERROR and "output window" in out.detail["error"]


@pytest.mark.parametrize(
    "reply",
    [
        {"ok": False, "kind": "profiler", "error": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"},
        {"ok": True, "kernels": []},
        {"ok": True, "kernels": "none"},
    ],
)
def test_a_profiler_that_fails_or_sees_nothing_is_a_flag_not_a_verdict(reply: dict[str, Any]) -> None:
    out = judge(on("cand", "profile", reply))
    assert out.status is Status.OK, out.detail
    assert out.score > 0
    assert [f for f in out.detail["flags"] if f["check"] == "kernel_ran_unverified"]


def test_a_profile_that_sees_only_other_kernels_is_a_decoy() -> None:
    out = judge(on("cand", "profile", {"ok": True, "kernels": ["at::native::vectorized_elementwise_kernel"]}))
    assert out.status is Status.WRONG_ANSWER and "none of the candidate's kernels" in out.detail["reason"]


def test_a_candidate_cut_by_a_budget_the_reference_spent_is_not_charged() -> None:
    """The stage's budget, not the candidate's own limit, ran out, and the reference used it."""

    def script(r: str, c: dict[str, Any]) -> Reply | None:
        if r == "ref" and c["cmd"] == "trial":
            return {**honest(r, c), "_sleep": 1.2}
        if r == "cand" and c["cmd"] == "trial":
            return ChildTimeout()
        return None

    out = judge(script, timeout_s=1.6)
    assert out.status is Status.INTERNAL_ERROR, out.detail
    assert "time budget ran out" in out.detail["error"]


# -- the candidate's own faults stay its verdicts -------------------------------------------------


@pytest.mark.parametrize(
    ("script", "status", "says"),
    [
        (
            on("cand", "load", {"ok": False, "kind": "runtime", "error": "ModelNew: no"}),
            Status.RUNTIME_ERROR,
            "ModelNew: no",
        ),
        (on("cand", "load", ChildTimeout()), Status.TIMEOUT, "did not answer load"),
        (on("cand", "trial", ChildTimeout()), Status.TIMEOUT, "did not answer trial in time"),
        (
            on("cand", "trial", ChildGone("the process exited")),
            Status.RUNTIME_ERROR,
            "ended or broke the protocol",
        ),
        (
            on("cand", "trial", {"ok": False, "kind": "cuda", "error": "illegal memory access"}),
            Status.RUNTIME_ERROR,
            "illegal memory access",
        ),
        (
            on("cand", "trial", {"ok": False, "kind": "memory", "error": "CUDA out of memory"}),
            Status.RUNTIME_ERROR,
            "needed more than the reference",
        ),
        (
            on("cand", "trial", {"ok": True, "tensors": [], "calls": 1}),
            Status.WRONG_ANSWER,
            "the candidate's outputs",
        ),
        (
            on(
                "cand",
                "trial",
                {"ok": True, "tensors": [{"dtype": "float32", "shape": [N + 1], "numel": N + 1}], "calls": 1},
            ),
            Status.WRONG_ANSWER,
            "expected [64]",
        ),
        (
            on("cand", "trial", {**honest("cand", {"cmd": "trial"}), "calls": 0}),
            Status.WRONG_ANSWER,
            "never ran",
        ),
        (
            on("ref", "cmp", {**honest("ref", {"cmd": "cmp", "count": N}), "bad": 3, "max": 0.5}),
            Status.WRONG_ANSWER,
            "3 of 64 elements",
        ),
        (on("cand", "put", {"ok": True, "copied": 0}), Status.WRONG_ANSWER, "did not hand over"),
        (
            on("cand", "go", {**honest("cand", {"cmd": "go"}), "digest": DIGEST + 1e6}, after=4),
            Status.WRONG_ANSWER,
            "differ from the reference's",
        ),
        (on("cand", "threads", {"ok": True, "threads": 9}), Status.WRONG_ANSWER, "threads"),
    ],
)
def test_the_candidates_own_faults_are_its_verdicts(script: Script, status: Status, says: str) -> None:
    out = judge(script)
    assert out.status is status, out.detail
    assert says in out.detail["reason"], out.detail["reason"]


def test_a_forged_digest_is_caught_by_the_references_recomputation() -> None:
    """Every timed call is spot-checked: the reference's digest of the chunks is not the reported one."""

    def script(r: str, c: dict[str, Any]) -> Reply | None:
        if r == "ref" and c["cmd"] == "cmp" and "a" in c:
            return {**honest(r, c), "digest": DIGEST + 5.0}
        return None

    out = judge(script, num_perf_trials=2)  # 3 timed calls <= spot_checks: all are checked
    assert out.status is Status.WRONG_ANSWER and "is not the digest of its outputs" in out.detail["reason"]
