"""Timing a judged program by repeated runs: the speed the ``cuda`` type scores, robust to noise.

Why: a ``cuda`` program is timed as a whole process (CUDA context, kernels, exit; the jail's own
start is left out by ``sandbox/exec_timer.py``). One run's time carries that process's noise,
and the first run of a freshly written binary pays cold caches on top: on an H200, one run per
case on the host's clock gave a runtime CV of 0.17 over ten requests of one honest program (0.04
without the cold first request), against a 2 % target.

So after the judged runs (``cases.run_tests``), each passed case runs ``runs`` more times:

* **Each timed run in a fresh session** (a new work dir and ``/tmp``, the binary written anew):
  nothing one run wrote reaches the next, so a program cannot answer a timed run from a cache it
  left behind (the cached-result hack).
* **Each timed run judged like the first.** A wrong, failing or crashing timed run fails the case
  with its own status: a racy kernel that is right once in four is not ``ok``.
* **The case's time is its fastest timed run.** Process noise only ever adds time, so the minimum
  is the estimator it moves least (``benchmarks/cuda_timing.py`` measures single run, median and
  minimum side by side). The judged first run is the warm-up and is not charged once a timed run
  has finished; with ``runs=0`` it is the charge, as before.
* **The stage budget is the service's, not the program's.** A timed run starts only while what
  is left of the budget leaves room for it (twice the case's first run, and a margin); a timed
  run that the budget cut short (its limit was lowered below the case's own) is not charged, and
  timing stops there. The case keeps the runs it had, and says how many (``timed_runs``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from distrs.core.model import Status
from distrs.rewards.judge.cases import CaseResult, Verdict, judge_case, verdict_of
from distrs.rewards.judge.payload import JudgedPayload
from distrs.sandbox import Limits, Mounts, Session

ROOM_FACTOR = 2.0  # a timed run starts only with this many first-run times left in the budget
ROOM_MARGIN_S = 0.25


def time_cases(
    open_session: Callable[[], AbstractContextManager[Session]],
    prepare: Callable[[Session], None],
    argv: Sequence[str],
    p: JudgedPayload,
    v: Verdict,
    limits: Limits,
    runs: int,
    deadline: float,
    *,
    env: dict[str, str] | None = None,
    mounts: Mounts | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Verdict:
    """``v`` with each passed case re-run ``runs`` times (module docstring); ``prepare`` writes
    what a fresh session needs (the binary) before its run."""
    if runs <= 0 or (p.scoring == "all" and v.status is not Status.OK):
        return v
    cases = list(v.cases)
    for i, first in enumerate(cases):
        if first.status is not Status.OK:
            continue
        times: list[float] = []
        failed: CaseResult | None = None
        for n in range(runs):
            left = deadline - clock()
            if left < ROOM_FACTOR * first.time_s + ROOM_MARGIN_S:
                break
            capped = limits.capped(left)
            with open_session() as s:
                prepare(s)
                r = s.run(argv, limits=capped, stdin=p.tests[i].stdin.encode(), env=env, mounts=mounts)
            if r.timed_out and capped.wall_s < limits.wall_s:
                break  # cut by the stage budget: the service's limit, not the program's
            res = judge_case(r, p.tests[i], p)
            if res.status is not Status.OK:
                failed = replace(res, detail={**res.detail, "failed_on_timed_run": n + 1})
                break
            times.append(r.wall_s)
        if failed is not None:
            cases[i] = failed
        elif times:
            cases[i] = CaseResult(
                Status.OK, min(times), {"timed_runs": len(times), "first_run_s": round(first.time_s, 4)}
            )
        else:
            cases[i] = replace(first, detail={**first.detail, "timed_runs": 0})
        if failed is not None and p.scoring == "all":
            break
    return verdict_of(cases, v.total, v.first_run)
