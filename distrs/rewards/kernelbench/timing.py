"""Pure timing arithmetic of the execute stage: what a timed call cost, and its statistics.

A judging process reports its own measurement of each timed call (CUDA events, or
``perf_counter`` on the CPU: *inner*), and the host measures the same call from outside
(command written to reply read, on its own clock: *outer*), which also covers the digest of
the outputs and a device-wide synchronisation. For an honest call, outer - inner is the round
trip alone; the reference (whose code is the task's, not the policy's) calibrates it per
request: the median of its gaps and their spread.

The candidate is charged its inner times, as KernelBench reports them, unless its calls'
median gap exceeds the reference's median gap by more than a margin (the larger of 50 us, a
tenth of its inner time and twice the spread of the reference's gaps, their interquartile
range): then work ran outside its own measurement (another stream, a thread, patched timers),
and every call is charged its outer time less the reference's median gap. A reading that is negative or longer than the
outer time is void and charged the same way. The decision is per request, so honest kernels
carry no bias from the host's clock jitter.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    inner_ms: float
    outer_ms: float

    @property
    def valid(self) -> bool:
        return 0.0 <= self.inner_ms <= self.outer_ms

    @property
    def gap_ms(self) -> float:
        return self.outer_ms - self.inner_ms


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


@dataclass(frozen=True)
class Charged:
    ref_ms: list[float]
    cand_ms: list[float]
    overhead_ms: float  # the reference's median gap
    hidden: bool  # the candidate's calls were charged the host's clock


def charge(ref: list[Call], cand: list[Call]) -> Charged:
    """Per-call times of both sides (see the module docstring)."""
    gaps = [c.gap_ms for c in ref if c.valid] or [0.0]
    median, spread = statistics.median(gaps), _quantile(gaps, 0.75) - _quantile(gaps, 0.25)
    ref_ms = [c.inner_ms if c.valid else max(0.0, c.outer_ms - median) for c in ref]
    inner = [c.inner_ms for c in cand if c.valid]
    margin = max(0.05, 0.1 * statistics.median(inner) if inner else 0.0, 2.0 * spread)
    cand_gap = statistics.median(c.gap_ms if c.valid else float("inf") for c in cand) if cand else 0.0
    hidden = cand_gap > median + margin
    cand_ms = [
        c.inner_ms if c.valid and not hidden else max(c.inner_ms if c.valid else 0.0, c.outer_ms - median)
        for c in cand
    ]
    return Charged(ref_ms, cand_ms, median, hidden)


def stats(times_ms: list[float], hardware: str, device: str) -> dict[str, object]:
    """KernelBench's ``runtime_stats``: mean, std, min, max (ms, 3 decimals) and the trial count."""
    return {
        "mean": round(statistics.fmean(times_ms), 3),
        "std": round(statistics.pstdev(times_ms), 3) if len(times_ms) > 1 else 0.0,
        "min": round(min(times_ms), 3),
        "max": round(max(times_ms), 3),
        "num_trials": len(times_ms),
        "hardware": hardware,
        "device": device,
    }


def digest_agrees(
    cand: float, ref: float, ref_scale: float, n_elements: int, atol: float, rtol: float
) -> bool:
    """Whether two digests of outputs that are allclose (atol, rtol) could differ by this much.

    With weights in [0, 1): ``|sum w (c - r)| <= sum w (atol + rtol |r|) <= atol * n + rtol * scale``,
    plus float64 rounding of the sums.
    """
    bound = atol * n_elements + rtol * ref_scale + 1e-9 * (abs(ref_scale) + 1.0)
    return abs(cand - ref) <= bound
