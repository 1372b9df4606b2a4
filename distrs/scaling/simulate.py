"""SIMULATE of DistRS Alg. 1 (line 12): does a worker allocation meet every batch's deadline?

A discrete-event simulation of M stages in series, each a pool of N_k identical workers that run
one request at a time (Sec. 4). Queues are ordered Earliest Batch First — the batch's estimated
completion T_b, then arrival at the stage — or FCFS for comparison (Sec. 5.2: "we also apply EBF
within the SIMULATE function").

Why stage by stage: the pipeline is feed-forward (a request only moves to later stages), and a
stage's queue discipline only looks at the requests that reached it, so stage k can be simulated
completely once stage k-1's departure times are known. That turns one event loop over every
stage into M small loops, each a heap of worker-free times, and lets the search (Alg. 1) cache
the stages before the one it is probing. The loops run in C (``_serve.c``, picked by
``serve_native.py``) where the extension is built, else in plain Python over lists with ``heapq``
(the hot path is one ``heapreplace`` per request, about 1 µs, sped up by ``free_flow.py``); both
give the same start times to the bit. Everything around them is numpy.

Checks, in the order they can fail:
* the timeout-aware rule (Sec. 5.1): a request found queued at stage k at time ts fails the
  check at once when LT = ts + Σ_{j≥k} T_j exceeds its batch's deadline T_b + D. A queued
  request is last found queued just before it starts, so the rule reads: a request that waited
  must start by T_b + D − Σ_{j≥k} T_j. With ``request_allowance_s`` (the policies' default,
  ``PolicyOptions.timeout_rule``) the deadline is the batch's T as it would be were this request
  to run to its timeouts: a request whose own worst case ends after T_b moves T with it, and
  then only its waiting adds to d. It may then wait up to the allowance (D) in all, counted from
  when it would have reached stage k had it never waited; the paper's rule let it wait not at
  all, although one GPU fewer typically meant a tail request waiting under 0.1 s;
* the batch-level constraint (Eq. 5): every batch must finish by T_b + D.

Already-running requests (Running_k of Alg. 2) hold a worker from ``now`` until their remaining
time is up. When N_k is below the number running, the surplus workers retire as soon as they are
free — exactly what the cluster does, since scale-down never kills a busy worker.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distrs.core.priority import QueuePolicy
from distrs.scaling import serve_native
from distrs.scaling.free_flow import FreeFlow
from distrs.scaling.workload import F64, I64, Workload, peak_overlap

EPS = 1e-9
TIMEOUT_CHECKS = ("enqueue", "start")


@dataclass
class SimResult:
    """Outcome of one simulation run."""

    satisfied: bool
    reason: str  # "ok" | "deadline" | "infeasible" (a check failed mid-stage) | "no-workers"
    stage: str | None = None  # where the timeout rule fired / workers were missing
    batch_finish: F64 = field(default_factory=lambda: np.zeros(0))
    completion: F64 = field(default_factory=lambda: np.zeros(0))

    def extra_delay(self, batch_T: F64) -> F64:
        """d_b = finish_b − T_b, floored at 0 (Table 1)."""
        return np.maximum(self.batch_finish - batch_T, 0.0)


def stable_argsort(x: F64) -> I64:
    """``np.argsort(x, kind="stable")``, the same permutation, several times faster on floats:
    numpy's default sort, then the indices of each run of equal values put back in order."""
    order = np.argsort(x)
    if x.size < 2:
        return order
    xs = x[order]
    if np.isnan(xs[-1]):  # NaNs sort last but never compare equal
        return np.argsort(x, kind="stable")
    eq = xs[1:] == xs[:-1]
    if eq.any():
        tied = np.zeros(x.size, dtype=bool)
        tied[1:] = eq
        tied[:-1] |= eq
        pos = np.flatnonzero(tied)
        starts = np.ones(pos.size, dtype=bool)
        starts[1:] = ~eq[pos[1:] - 1]  # xs[p] differs from xs[p - 1]: a new run
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, np.cumsum(starts)))]
    return order


def free_run(flow: FreeFlow, i: int, free: list[float], start: list[float]) -> int:
    """The serve loops' bulk step: requests i, i+1, ... that wait for nothing started at once
    (``FreeFlow.run``); the next request to serve one by one, or −1 when the run fails a limit."""
    p = flow.run(i, free, start)
    return -1 if p < 0 else i + p


def serve_fcfs(
    arr: list[float],
    svc: list[float],
    free: list[float],
    wait_limit: list[float],
    limit: list[float],
    flow: FreeFlow | None = None,
) -> list[float] | None:
    """Start times of requests served in arrival order by workers free at ``free`` (a heap).

    Returns None as soon as a request that had to wait starts after its ``wait_limit`` (the
    timeout-aware rule), or one finishes after its ``limit`` (the latest finish at this stage
    that can still meet its batch deadline). ``flow`` (the same requests as arrays) lets runs
    of requests that wait for nothing be settled in bulk (``free_flow.py``); same result.
    """
    n = len(arr)
    start = [0.0] * n
    replace = heapq.heapreplace
    i = 0
    while i < n:
        if flow is not None and i >= flow.next_try:
            i = free_run(flow, i, free, start)
            if i < 0:
                return None
            if i >= n:
                break
        a = arr[i]
        f = free[0]
        if a >= f:
            s0 = a
        else:
            if f > wait_limit[i]:
                return None
            s0 = f
        end = s0 + svc[i]
        if end > limit[i]:
            return None
        start[i] = s0
        replace(free, end)
        i += 1
    return start


def serve_priority(
    arr: list[float],
    svc: list[float],
    rank: list[int],
    free: list[float],
    wait_limit: list[float],
    limit: list[float],
    flow: FreeFlow | None = None,
    inv: list[int] | None = None,
) -> list[float] | None:
    """Start times under a non-preemptive priority queue (None on an early failure, as above).

    ``arr`` is sorted ascending; ``rank[i]`` is request i's position in priority order (EBF:
    batch T_b, then arrival), a permutation of range(n) — plain ints keep the heap cheap. A freed
    worker takes the best-ranked request that arrived before it came free; an idle worker takes
    the next arrival as it comes (one arriving the instant a worker frees is the next arrival, as
    ``free_flow`` starts it). ``inv`` is the inverse permutation when the caller has it.
    """
    n = len(arr)
    start = [0.0] * n
    if inv is None:
        inv = [0] * n
        for i, r in enumerate(rank):
            inv[r] = i
    ready: list[int] = []
    replace, push, pop, pushpop = heapq.heapreplace, heapq.heappush, heapq.heappop, heapq.heappushpop
    i = 0
    while i < n:
        # Nobody waiting (every arrived request has started): requests start as they arrive
        # while a worker is free.
        if flow is not None and i >= flow.next_try:
            i = free_run(flow, i, free, start)
            if i < 0:
                return None
            if i >= n:
                break
        a = arr[i]
        f = free[0]
        if a >= f:
            end = a + svc[i]
            if end > limit[i]:
                return None
            start[i] = a
            replace(free, end)
            i += 1
            continue
        # A busy period: serve by rank until the queue is empty again.
        while True:
            if i < n and arr[i] < f:  # arrivals before f join the queue; the best one starts
                while i + 1 < n and arr[i + 1] < f:
                    push(ready, rank[i])
                    i += 1
                j = inv[pushpop(ready, rank[i])]
                i += 1
            else:
                j = inv[pop(ready)]
            if f > arr[j] and f > wait_limit[j]:
                return None
            end = f + svc[j]
            if end > limit[j]:
                return None
            start[j] = f
            replace(free, end)
            if not ready:
                break
            f = free[0]
    return start


@dataclass
class StageQueue:
    """Stage k's queue members in arrival order, with their limits (``Simulator._prepare``).

    Arrays for the C loops and ``no_wait_bound``; ``lists`` converts them once for the Python
    loops (plain floats and ints keep ``heapq`` cheap)."""

    idx: I64  # request rows, by arrival at the stage
    arr: F64
    svc: F64
    rank: I64 | None  # EBF: position in priority order; None under FCFS
    inv: I64 | None  # its inverse permutation
    wait_limit: F64
    limit: F64
    _lists: tuple[Any, ...] | None = None

    def lists(self) -> tuple[Any, ...]:
        """(arr, svc, rank, inv, wait_limit, limit) as lists (rank, inv None under FCFS)."""
        if self._lists is None:
            self._lists = (
                self.arr.tolist(),
                self.svc.tolist(),
                None if self.rank is None else self.rank.tolist(),
                None if self.inv is None else self.inv.tolist(),
                self.wait_limit.tolist(),
                self.limit.tolist(),
            )
        return self._lists


class Simulator:
    """SIMULATE(Num, R, S, D) for one workload, reusable across the probes of a search.

    ``deadlines`` is the absolute deadline per batch (T_b + D, see ``search.deadlines``);
    ``request_floor`` optionally raises it per request (``search.request_floors``). A run is
    satisfied when every request finishes by its deadline.
    """

    def __init__(
        self,
        wl: Workload,
        deadlines: F64,
        policy: QueuePolicy = QueuePolicy.EBF,
        timeout_aware: bool = True,
        timeout_check: str = "enqueue",
        request_floor: F64 | None = None,
        request_allowance_s: float | None = None,
    ) -> None:
        """``request_allowance_s``: the timeout rule's per-request allowance (module docstring);
        None applies Sec. 5.1 as written."""
        self.wl = wl
        self.request_allowance_s = request_allowance_s
        self.deadlines = np.asarray(deadlines, dtype=float)
        self.policy = policy
        self.timeout_aware = timeout_aware
        if timeout_check not in TIMEOUT_CHECKS:
            raise ValueError(f"timeout_check must be one of {TIMEOUT_CHECKS}, not {timeout_check!r}")
        self.timeout_check = timeout_check
        self.runs = 0
        m = wl.num_stages
        req_dl = self.deadlines[wl.batch] if wl.n else np.zeros(0)
        if request_floor is not None and wl.n:
            req_dl = np.maximum(req_dl, request_floor)  # see search.request_floors
        self._req_deadline = req_dl
        prio = wl.batch_T[wl.batch] if policy is QueuePolicy.EBF and wl.n else np.zeros(wl.n)
        self._prio = prio
        self._visit: list[I64] = []
        self._run: list[I64] = []
        self._queue: list[I64] = []
        for k in range(m):
            vis = (wl.service[:, k] > 0) & (wl.first_stage <= k)
            run = vis & (wl.first_stage == k) & wl.running
            self._visit.append(np.flatnonzero(vis))
            self._run.append(np.flatnonzero(run))
            self._queue.append(np.flatnonzero(vis & ~run))
        rest = np.cumsum(wl.service[:, ::-1], axis=1)[:, ::-1] - wl.service
        self._rest = [rest[:, k] for k in range(m)]  # Σ_{j>k} s_j per request
        before = np.cumsum(wl.service, axis=1) - wl.service
        self._zq_arrival = [wl.arrival + before[:, k] for k in range(m)]  # at stage k, no waits
        self._static = [self._queue_constants(k) for k in range(m)]
        self._cache: dict[tuple[int, ...], tuple[F64, SimResult | None]] = {}
        self._prep: dict[tuple[int, ...], StageQueue] = {}
        self.native = serve_native.KERNEL
        """The C serve loops, or None for the Python ones (``serve_native.py``; same result)."""
        self.free_flow = True
        """Python loops: settle runs of requests that wait for nothing in bulk (``free_flow.py``;
        same result)."""
        self.record: dict[int, tuple[F64, F64]] | None = None
        """When a dict, ``_stage`` stores each stage's busy intervals (begin, end) in it."""

    def visitors(self, k: int) -> int:
        return int(self._visit[k].shape[0])

    def _queue_constants(self, k: int) -> tuple[F64, F64, F64 | None, F64 | None, Any]:
        """What ``_prepare`` needs of stage k's queue members that no probe changes, in the
        order of ``_queue[k]``: run time, latest finish, latest queuing time (+EPS), the
        allowance's latest start, and the EBF priority level (ties share one).

        Sec. 5.1: a request found queued at stage k at time ts fails the check when
        LT = ts + Σ_{j≥k} T_j > T_b + D. The serve loops fail a request that waited and starts
        after its ``wait_limit``. "enqueue": ts is the moment it joins the queue (its arrival at
        the stage), so a request arriving after T_b + D − Σ_{j≥k} T_j must not wait at all
        (wait_limit = its arrival) and an earlier one may wait (wait_limit = inf). "start": ts is
        the last moment it is still queued, just before it starts, so a waiting request must
        start by T_b + D − Σ_{j≥k} T_j. With the per-request allowance either may still start up
        to ``request_allowance_s`` after its zero-queuing arrival at the stage (see the module
        docstring). And no request may finish stage k later than its deadline minus the run time
        it still needs downstream (the batch constraint of Eq. 5, checked early so failing probes
        stop early)."""
        wl = self.wl
        q = self._queue[k]
        dl = self._req_deadline[q]
        svc = wl.service[q, k]
        limit = dl - self._rest[k][q] + EPS
        latest = own = None
        if self.timeout_aware:
            latest = dl - wl.timeout_suffix[wl.batch[q], k] + EPS
            if self.request_allowance_s is not None:
                own = self._zq_arrival[k][q] + self.request_allowance_s + EPS
        level = None
        if self.policy is QueuePolicy.EBF:
            # Dense ranks of T_b: a stable sort of small ints (a radix sort) orders the queue by
            # T_b, then arrival, as a sort on (T_b, position) would.
            _, level = np.unique(self._prio[q], return_inverse=True)
            if level.size and int(level.max()) < 1 << 16:
                level = level.astype(np.uint16)
        return svc, limit, latest, own, level

    def _prepare(self, k: int, t: F64) -> StageQueue:
        """Queue members of stage k in arrival order, with their limits (``_queue_constants``)."""
        q = self._queue[k]
        svc_q, limit_q, latest_q, own_q, level_q = self._static[k]
        arr_all = t[q]
        order = stable_argsort(arr_all)
        arr = arr_all[order]
        idx = q[order]
        svc = svc_q[order]
        if latest_q is not None:
            latest = latest_q[order]
            wait_limit = np.where(arr <= latest, np.inf, arr) if self.timeout_check == "enqueue" else latest
            if own_q is not None:
                wait_limit = np.maximum(wait_limit, own_q[order])
        else:
            wait_limit = np.full(idx.size, np.inf)
        limit = limit_q[order]
        rank = inv = None
        if level_q is not None:
            inv = np.argsort(level_q[order], kind="stable")
            rank = np.empty(idx.size, dtype=np.int64)
            rank[inv] = np.arange(idx.size)
        return StageQueue(idx, arr, svc, rank, inv, wait_limit, limit)

    def _prepared(self, k: int, t: F64, upstream: tuple[int, ...]) -> StageQueue:
        """``_prepare`` memoised by the upstream allocation: stage k's arrivals depend only on
        the stages before it, so the queue is reused while the search probes this stage (or a
        later one) with the earlier ones fixed."""
        prep = self._prep.get(upstream)
        if prep is None:
            prep = self._prepare(k, t)
            if len(self._prep) > 64:
                self._prep.clear()
            self._prep[upstream] = prep
        return prep

    def _stage(self, k: int, n_workers: int, t: F64, upstream: tuple[int, ...]) -> SimResult | None:
        """Serve stage k in place on ``t`` (ready times); a SimResult when a check fails."""
        wl = self.wl
        run, q = self._run[k], self._queue[k]
        if run.size:
            t[run] = t[run] + wl.service[run, k]
        if self.record is not None:
            self.record[k] = (np.full(run.size, wl.now), t[run].copy())
        if not q.size:
            return None
        if n_workers <= 0:
            return SimResult(False, "no-workers", wl.stage_names[k])
        # Worker-free times, ascending (so already a heap): idle workers free since forever, then
        # the running requests' ends; surplus busy workers retire when free, so when N is below
        # the number running the N latest finishers remain.
        ends = np.sort(t[run]) if run.size else np.zeros(0)
        free = np.empty(n_workers)
        if n_workers >= ends.size:
            free[: n_workers - ends.size] = -np.inf
            free[n_workers - ends.size :] = ends
        else:
            free[:] = ends[ends.size - n_workers :]
        sq = self._prepared(k, t, upstream)
        start = self._serve(sq, free)
        if start is None:
            return SimResult(False, "infeasible", wl.stage_names[k])
        idx = sq.idx
        t[idx] = start + sq.svc
        if self.record is not None:
            b0, e0 = self.record[k]
            self.record[k] = (np.concatenate([b0, start]), np.concatenate([e0, t[idx]]))
        return None

    def _serve(self, sq: StageQueue, free: F64) -> F64 | None:
        """Start times of ``sq``'s requests with workers free at ``free`` (ascending; used up),
        None on an early failure: the C loops when built, else the Python ones."""
        if self.native is not None:
            start = np.empty(sq.idx.size)
            if sq.rank is not None:
                ok = self.native.priority(
                    sq.arr, sq.svc, sq.rank, sq.inv, free, sq.wait_limit, sq.limit, start
                )
            else:
                ok = self.native.fcfs(sq.arr, sq.svc, free, sq.wait_limit, sq.limit, start)
            return start if ok else None
        arr, svc, rank, inv, wait_limit, limit = sq.lists()
        heap = free.tolist()  # ascending: a heap already
        flow = FreeFlow(sq.arr, sq.arr + sq.svc, sq.limit) if self.free_flow else None
        if rank is not None:
            out = serve_priority(arr, svc, rank, heap, wait_limit, limit, flow, inv)
        else:
            out = serve_fcfs(arr, svc, heap, wait_limit, limit, flow)
        return None if out is None else np.asarray(out)

    def _through(self, reps: tuple[int, ...], end: int) -> tuple[F64, SimResult | None]:
        """Ready times after stages [0, end) served by ``reps``, and the first failure if any.

        Resumes from the longest cached prefix (stages before k are fixed while the search
        probes stage k) and caches each stage it serves, except the last of the pipeline."""
        m = self.wl.num_stages
        t: F64 = self.wl.arrival.copy()
        begin = 0
        for k in range(end, 0, -1):
            hit = self._cache.get(reps[:k])
            if hit is not None:
                cached_t, failed = hit
                if failed is not None:
                    return cached_t, failed
                t = cached_t.copy()
                begin = k
                break
        for k in range(begin, end):
            failed = self._stage(k, reps[k], t, reps[:k])
            if k + 1 < m:
                if len(self._cache) > 128:
                    self._cache.clear()
                self._cache[reps[: k + 1]] = (t.copy() if failed is None else t, failed)
            if failed is not None:
                return t, failed
        return t, None

    def no_wait_bound(self, k: int, replicas: Sequence[int]) -> int:
        """Fewer workers than this at stage k fail for certain, the stages before it as given.

        Under the timeout-aware rule a request that joins stage k's queue after its latest
        queuing time must find a worker free the moment it arrives. A worker is free then only
        if every request that reached the stage earlier has started (a freed worker always takes
        a waiting request), so each of those whose arrival + s_k is later still holds one, and
        so does every request already running at stage k that has not finished (when fewer
        workers than running requests are kept, the kept ones finish last, all busy then). N_k
        must cover those plus the arriving request at each such arrival. The bisection starts
        here: probes below it would only fail.

        A request that may wait, but only until W (the per-request rule's allowance), needs a
        worker by W. When it starts, at s ≤ W, every request that arrived before it and ranks
        ahead of it has started (a freed worker takes the best-ranked one), so each of those
        whose arrival + s_k is after W is still running: at least #{ranked ahead, arrived
        before} − #{ranked ahead, arrival + s_k ≤ W} of them, plus the running ones, plus itself.
        """
        if not self.timeout_aware or not self._queue[k].size:
            return 0
        reps = tuple(int(x) for x in replicas)
        t, failed = self._through(reps, k)
        if failed is not None:
            return 0
        sq = self._prepared(k, t, reps[:k])
        idx, arr, limit = sq.idx, sq.arr, sq.wait_limit  # arr ascending
        ends = arr + sq.svc
        run = self._run[k]
        run_ends = np.sort(t[run] + self.wl.service[run, k])
        best = 0
        fixed = np.flatnonzero(limit <= arr)
        if fixed.size:
            a = arr[fixed]
            earlier = np.searchsorted(arr, a, side="left") - np.searchsorted(np.sort(ends), a, side="right")
            running = run_ends.size - np.searchsorted(run_ends, a, side="right")
            best = int((earlier + running).max()) + 1
        bounded = np.flatnonzero(np.isfinite(limit) & (limit > arr))
        if bounded.size:
            # EBF: T_b (ties by arrival); FCFS: all 0. As dense levels, so that "ranked ahead"
            # is level <= L; the ends once sorted, so that "finished by w" is a prefix of them.
            _, level = np.unique(self._prio[idx], return_inverse=True)
            by_end = np.argsort(ends)  # any order of equal ends: only prefixes up to w are counted
            level_by_end = level[by_end]
            w_all = limit[bounded]
            cut = np.searchsorted(ends[by_end], w_all, side="right")
            running = run_ends.size - np.searchsorted(run_ends, w_all, "right")
            late = ends[bounded] > w_all
            mine_level = level[bounded]
            if self.native is not None:  # the same counts in one sweep each (_serve.c)
                upto = np.empty(bounded.size, dtype=np.int64)
                finished = np.empty(bounded.size, dtype=np.int64)
                levels = int(level.max()) + 1
                self.native.prefix_counts(level, levels, bounded + 1, mine_level, upto)
                self.native.prefix_counts(level_by_end, levels, cut, mine_level, finished)
                return max(best, int((upto - finished - late + running).max()) + 1)
            for lv in np.unique(mine_level):
                sel = mine_level == lv
                # ranked ahead (or itself) and arrived no later; ranked ahead among the i earliest ends
                upto = np.cumsum(level <= lv, dtype=np.int32)[bounded[sel]]
                done = np.cumsum(level_by_end <= lv, dtype=np.int32)
                finished = np.where(cut[sel] > 0, done[cut[sel] - 1], 0)
                busy = upto - finished - late[sel] + running[sel]
                best = max(best, int(busy.max()) + 1)
        return best

    def run(self, replicas: Sequence[int]) -> SimResult:
        """Simulate with ``replicas[k]`` workers at pipeline stage k."""
        self.runs += 1
        wl = self.wl
        m = wl.num_stages
        reps = tuple(int(x) for x in replicas)
        t, failed = self._through(reps, m)
        if failed is not None:
            return failed
        finish = np.full(len(wl.batch_keys), -np.inf)
        if wl.n:
            np.maximum.at(finish, wl.batch, t)
        ok = bool(np.all(t <= self._req_deadline + EPS))
        return SimResult(ok, "ok" if ok else "deadline", None, finish, t)


def busy_peaks(wl: Workload, replicas: Sequence[int], until: float, policy: QueuePolicy) -> list[int]:
    """Per stage, the most workers busy at once before ``until`` when ``replicas`` serve ``wl``.

    The schedule is SIMULATE's, without the checks (nothing stops it early). A plan that needs
    N_k workers from ``now`` on needs only this many of them before ``until``.
    """
    sim = Simulator(wl, np.full(len(wl.batch_keys), np.inf), policy, timeout_aware=False)
    sim.record = {}
    sim.run(replicas)
    out = []
    for k in range(wl.num_stages):
        begin, end = sim.record.get(k, (np.zeros(0), np.zeros(0)))
        keep = begin < until
        out.append(peak_overlap(begin[keep], np.minimum(end[keep], until)))
    return out


def simulate(
    wl: Workload,
    replicas: Sequence[int],
    deadlines: F64,
    policy: QueuePolicy = QueuePolicy.EBF,
    timeout_aware: bool = True,
    timeout_check: str = "enqueue",
    request_floor: F64 | None = None,
    request_allowance_s: float | None = None,
) -> SimResult:
    """One-shot SIMULATE (see ``Simulator``)."""
    sim = Simulator(wl, deadlines, policy, timeout_aware, timeout_check, request_floor, request_allowance_s)
    return sim.run(replicas)
