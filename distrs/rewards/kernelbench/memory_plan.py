"""Whether a problem fits the execute worker's memory: two processes' inputs and outputs.

A request runs the reference and the candidate in two processes on one device (the GPU, or the
CPU for backend ``cpp``), so the device must hold the reference's working set twice over (its
inputs, outputs, L2 flush buffer and intermediates: its peak) plus the reference's scratch for
comparing the candidate's chunks. The host learns the reference's peak from its first trial
and the device's free memory from the reference's process with its outputs held, before the
candidate runs its first trial. A problem that cannot fit is the service's ``internal_error``,
naming the figures, never a candidate verdict; once it fits, a candidate that runs out of
memory needed more than the reference and is charged for it.
"""

from __future__ import annotations

GiB = 1 << 30
COMPARE_SCRATCH_SLOTS = 8  # the reference's temporaries per compared chunk, in window slots


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def misfit(device: str, ref_peak: int, free: int, total: int, slot_bytes: int) -> str | None:
    """Why the candidate cannot get what the reference needed, or None where it fits."""
    need = ref_peak + COMPARE_SCRATCH_SLOTS * slot_bytes
    if free >= need:
        return None
    where = "the GPU" if device == "cuda" else "this worker's memory"
    return (
        f"the problem does not fit {where}: the reference's process peaked at {gib(ref_peak)}, and "
        f"the candidate's needs as much again plus {gib(need - ref_peak)} of comparison scratch, "
        f"but {gib(free)} of {gib(total)} are free with the reference's outputs held"
    )
