"""Reward formulas for ``kernelbench``: what a verdict is worth to the policy.

Every formula maps one :class:`Outcome` to a float. Names are what a payload's ``reward`` picks:

``speedup`` (default)
    0 unless correct; a correct kernel scores ``min(speedup, speedup_cap)`` (without
    ``measure_performance``: 1). Not in [0, 1]: 1 means as fast as the reference.
``kevin``
    Kevin's ``0.3·correct + speedup·correct`` with the speedup capped at ``speedup_cap``;
    every failure (format, compile, rejected, incorrect) scores 0 here, since the published
    negative values are not public.
``kernelgym``
    KernelGYM's step table: compile failure -0.5 (a format error or a rejected hack counts as
    one), incorrect -0.3, correct but slower than the reference -0.1, then 0.2 / 0.4 / 0.6 /
    0.8 / 1.0 at speedup >= 1 / 1.2 / 1.5 / 2 / 3 (a correct kernel without a measured speedup
    scores 0.2).

An ``internal_error`` is never scored by a formula: it is the service's fault, and the result's
status says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    """How far a candidate got."""

    FORMAT_ERROR = "format_error"  # no code block in the completion
    REJECTED = "rejected"  # a static check found a hack or no custom kernel
    COMPILE_ERROR = "compile_error"
    INCORRECT = "incorrect"  # wrong answer, runtime error, time-out, or a hack caught at run time
    CORRECT = "correct"


@dataclass(frozen=True)
class Outcome:
    stage: Stage
    speedup: float | None = None  # reference runtime / candidate runtime, where measured


def _speedup(o: Outcome, cap: float) -> float:
    if o.stage is not Stage.CORRECT:
        return 0.0
    return 1.0 if o.speedup is None else min(max(o.speedup, 0.0), cap)


def _kevin(o: Outcome, cap: float) -> float:
    if o.stage is not Stage.CORRECT:
        return 0.0
    return 0.3 + (1.0 if o.speedup is None else min(max(o.speedup, 0.0), cap))


KERNELGYM_STEPS = ((3.0, 1.0), (2.0, 0.8), (1.5, 0.6), (1.2, 0.4), (1.0, 0.2))


def _kernelgym(o: Outcome, cap: float) -> float:
    if o.stage in (Stage.FORMAT_ERROR, Stage.REJECTED, Stage.COMPILE_ERROR):
        return -0.5
    if o.stage is Stage.INCORRECT:
        return -0.3
    if o.speedup is None:
        return 0.2
    for at_least, value in KERNELGYM_STEPS:
        if o.speedup >= at_least:
            return value
    return -0.1


FORMULAS: dict[str, Callable[[Outcome, float], float]] = {
    "speedup": _speedup,
    "kevin": _kevin,
    "kernelgym": _kernelgym,
}


def score(name: str, outcome: Outcome, speedup_cap: float) -> float:
    """The reward of ``outcome`` under formula ``name`` (a key of :data:`FORMULAS`)."""
    return FORMULAS[name](outcome, speedup_cap)
