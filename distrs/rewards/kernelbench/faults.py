"""Whose fault it is at the ``kernelbench`` execute stage, and the result a candidate's fault ends in.

The candidate's exceptions, crashes, illegal memory accesses and overruns are its own
(``runtime_error``, ``timeout``, ``wrong_answer``); anything the reference, the profiler, the
window, the memory plan or the harness does wrong is ``internal_error`` or a flag, never a score.
A candidate step cut short by the stage's budget rather than its own limit is the candidate's
only when the candidate, not the reference, spent most of the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import StageOutput
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.payload import KernelPayload


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
    """What the judge has learnt of one request so far, for its result whoever's fault ends it."""

    flags: list[dict[str, str]] = field(default_factory=list)
    max_difference: list[float] = field(default_factory=list)
    avg_difference: list[float] = field(default_factory=list)
    passed: int = 0
    versions: dict[str, Any] = field(default_factory=dict)


def fault_result(p: KernelPayload, report: Report, e: CandidateFault) -> StageOutput:
    """The result of a request the candidate's fault ended: KernelBench's fields, the reason."""
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
