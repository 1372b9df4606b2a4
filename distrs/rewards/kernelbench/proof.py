"""Proof that the candidate's own GPU kernels ran: the verdict on one profiled forward.

The compile stage lists the ``__global__`` kernels of the candidate's sources
(``kernel_names``); the execute stage runs one forward of the candidate under the CUDA
profiler, in its own process, and reads the names of the kernels that ran. The profiler is the
service's tool, not the candidate's: where it cannot start inside the jail, fails to report, or
sees no kernel at all, nothing is proven either way and the result carries the flag
``kernel_ran_unverified`` instead of a verdict (the call counts of the shipped extension and the
static checks still hold). Only a profiler that saw kernels, none of them the candidate's, is a
verdict: the work was done by something else (a decoy). The static checks reject a source that
touches the profiler or any other module's attributes, so a failure cannot be arranged from the
candidate's Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KernelRan:
    flag: dict[str, str] | None = None  # kernel_ran_unverified, with why
    decoy: str | None = None  # the verdict's reason, where the profiler saw only other kernels
    launched: list[str] = field(default_factory=list)


def kernel_ran(names: list[str], reply: dict[str, Any]) -> KernelRan:
    """The check on the candidate's ``profile`` reply (``judge_process.py``)."""
    if not reply.get("ok"):
        why = f"the CUDA profiler failed in the judging process: {str(reply.get('error'))[-500:]}"
        return KernelRan(flag={"check": "kernel_ran_unverified", "why": why})
    kernels = reply.get("kernels")
    if not isinstance(kernels, list):
        return KernelRan(flag={"check": "kernel_ran_unverified", "why": "the profiler reported no list"})
    launched = [str(k) for k in kernels]
    if not launched:
        why = "the CUDA profiler saw no kernel at all in a forward (the profiler, not the candidate)"
        return KernelRan(flag={"check": "kernel_ran_unverified", "why": why}, launched=launched)
    if not names or any(any(n in k for k in launched) for n in names):
        return KernelRan(launched=launched)
    return KernelRan(
        decoy=f"none of the candidate's kernels ({', '.join(names[:5])}) ran in a profiled call",
        launched=launched,
    )
