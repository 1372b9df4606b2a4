"""Runs of requests that start the moment they arrive, found with numpy instead of one by one.

Used by SIMULATE's Python serve loops, the fallback where the C ones (``_serve.c``, chosen by
``serve_native.py``) are not built; the C loops are faster than this bulk path and need none.

SIMULATE's serve loops (``simulate.py``) pop a worker-free time from a heap per request. Near
the allocation Alg. 1 settles on, many requests find a worker free when they arrive (> 99.7 %
of 52-66k requests per stage in a passing probe under Sec. 5.1's rule as written; 27-50 % under
the per-request rule, which settles on fewer workers), and the loop spends that part confirming
that nobody waits. This module finds such a run in one pass over an array.

With requests sorted by arrival a_0 ≤ a_1 ≤ ..., a heap F of N worker-free times and every
request of the run starting at its arrival, request i of the run finds a worker free unless

    #{f ∈ F : f > a_i} + #{j < i in the run : a_j + s_j > a_i} ≥ N,

because a run only ever replaces the earliest free time by a later one (a_j + s_j > a_j ≥ every
time it replaced): after the run the heap holds the N largest of F and the run's ends. The first
i that breaks the inequality is where the loop must take over (that request waits). Ends of
later requests are all > a_i, so counting them in the sorted ends changes nothing before i.

Chunks double while whole chunks run free and shrink back after a wait, so a stretch of short
busy periods (where the per-request loop is the faster one) costs a few small array passes.
"""

from __future__ import annotations

import heapq

import numpy as np

from distrs.scaling.workload import F64

MIN_RUN = 64
"""Shorter stretches are left to the per-request loop (an array pass costs about that much)."""


class FreeFlow:
    """Arrival-sorted arrays of one stage's queue members, for ``run`` (one per serve loop)."""

    def __init__(self, arr: F64, end: F64, limit: F64) -> None:
        """``end`` = arrival + run time at the stage; ``limit``: the latest allowed finish."""
        self.arr = arr
        self.end = end
        self.limit = limit
        self.n = int(arr.size)
        self._chunk = 256
        self.next_try = 0
        """The per-request loop should call ``run`` again from this index on."""

    def run(self, i: int, free: list[float], start: list[float]) -> int:
        """Start requests i, i+1, ... at their arrival while a worker is free for each.

        Updates ``free`` (a heap, modified in place) and ``start``; returns how many started,
        or −1 when one of them would finish after its ``limit`` (the caller fails the run).
        """
        cap = min(self.n - i, self._chunk)
        if cap < MIN_RUN:
            self.next_try = self.n
            return 0
        a = self.arr[i : i + cap]
        e = self.end[i : i + cap]
        f = np.asarray(free)
        hi = np.sort(f[f > a[0]])
        busy = (hi.size - np.searchsorted(hi, a, side="right")) + (
            np.arange(cap) - np.searchsorted(np.sort(e), a, side="right")
        )
        over = np.flatnonzero(busy >= len(free))
        p = int(over[0]) if over.size else cap
        if p and bool(np.any(e[:p] > self.limit[i : i + p])):
            return -1
        if p:
            start[i : i + p] = a[:p].tolist()
            if p * 8 < f.size:  # a short run: as the loop would, one replacement each
                replace = heapq.heapreplace
                for end in e[:p].tolist():
                    replace(free, end)
            else:  # the N largest of the free times and the run's ends
                both = np.concatenate([f, e[:p]])
                free[:] = np.partition(both, p)[p:].tolist()
                heapq.heapify(free)
        if p == cap:
            self._chunk = min(self._chunk * 2, 1 << 16)
            self.next_try = i + p
        else:
            self._chunk = 256
            self.next_try = i + p + (0 if p >= MIN_RUN else MIN_RUN)
        return p
