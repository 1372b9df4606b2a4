"""Closed-loop replay of a ``distrs-trace/1`` trace against a scaling policy.

A discrete-event model of the reward service of DistRS Sec. 4 with the planner in the loop:

* **Requests** enter the first stage they need at their trace arrival time, run ``s_<stage>`` at
  each stage they reach (one request per worker) and leave after their last stage (a request
  with no stage time at all is done on arrival, or passes the first stage in
  ``empty_request_s``, as the live service runs it; ``handoff_s`` adds a worker's lease and
  completion round trips to each stage visit, divided by the size of the lease bundle a live
  worker would take for a request that short, ``core.bundles.bundle_size``); per-stage
  queues are Earliest Batch First by the batch's estimated completion (Sec. 5.2), FCFS within
  a batch (or FCFS overall, ``queue_policy``).
* **Decisions** (``distrs.scaling.policies.plan``) run at every rollout-start hint, first arrival
  and completion of a batch (Sec. 5.2, "whenever a batch arrives or completes"; hints, Sec. 4),
  and every ``replan_interval_s`` while a batch is active (the live planner's periodic re-plan;
  Alg. 2's Queuing_k/Running_k sets are what make a mid-batch decision meaningful; a re-plan
  may remove workers too, within the policy's scale-down hysteresis, whose margin defaults to
  ``cold_start_s``),
  from a ``PlanContext`` built the way the live planner builds it: active batches with their
  queued counts and running requests' elapsed times, and the task's finished-batch profiles.
* **Workers**: a scale-up starts workers that become usable after ``cold_start_s``; because the
  hint comes ~30 s before the first request, the delay is hidden (Sec. 4). A scale-down first
  cancels workers still starting, then removes idle ones, and marks busy ones to retire when
  their request is done: a busy worker is never killed.
* **Colocated training** cannot start the next rollout before the batch's rewards are back, so
  a task's later batches shift by the extra delay its batches suffered; disaggregated ones don't.
* **Accounting**: allocated worker-seconds per stage (every existing worker: starting, idle,
  busy, draining), busy worker-seconds, extra delay d = completion − T per batch (T from Eq. 1-2
  on the batch's true times), and the planner's wall time per decision.

Pure: no I/O, the clock is the event time. ``replay`` takes a few seconds per 100k requests plus
the planner's own time.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from distrs.core.bundles import bundle_size
from distrs.core.history import BatchProfile, RequestProfile, finished_sample
from distrs.core.priority import QueuePolicy
from distrs.scaling.context import ActiveBatch, Decision, OracleBatch, PlanContext, PolicyOptions
from distrs.scaling.policies import plan
from distrs.sim.ledger import IdleWorkers, StageLedger
from distrs.sim.trace import Trace

_DONE, _READY, _HINT, _ARRIVE, _TICK = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class ClusterParams:
    policy: str = "distrs"
    max_extra_delay_s: float = 2.0
    cold_start_s: float = 15.0
    max_replicas: int = 100_000
    queue_policy: QueuePolicy = QueuePolicy.EBF
    decide_on_first_arrival: bool = True
    replan_interval_s: float | None = 15.0
    """Also re-plan every this many seconds while batches are active, as the live planner does
    (``interval_s``); None or 0: only at batch events (the paper's Sec. 5.2 trigger set)."""
    replan_scale_down: bool = True
    """Whether a periodic re-plan may also remove workers (the live planner's does)."""
    history_window: int = 8
    """Finished batches kept per task (the store's ``history_batches``)."""
    oracle_priority: bool = False
    """Rank EBF queues by each batch's true T instead of the policy's estimate (EBF experiment)."""
    reward_type: str = "cuda"
    handoff_s: float = 0.0
    """Worker time per stage visit on top of the run time: the lease and completion round trips
    of a real worker, during which it is neither running a request nor free. Counts in the
    allocated, not the busy, worker-seconds and not in T. Milliseconds in the live service, so
    0 is right at trace scale; a time-compressed replay magnifies it (sim-vs-live)."""
    max_bundle: int = 1
    """Most requests a worker leases at once (the workers' ``max_bundle``); 1: no bundles."""
    bundle_target_s: float = 0.25
    """A bundle holds as many requests as run in about this long (the workers' setting): a visit
    of run time s then costs ``handoff_s / bundle_size(s, bundle_target_s, max_bundle)`` of
    hand-off, the bundle's one lease and one completion shared by its requests."""
    empty_request_s: float = 0.0
    """Run time at the first stage of a request the trace gives no stage time at all (a rollout
    with no code to compile, status ``gen_failed``). 0: such a request never enters the service
    and is done on arrival (the trace read literally; the scaling benchmark does so). > 0: it
    queues at the first stage and takes a worker for this long, as in the live service, where
    every request is submitted to its type's first stage and a worker there fails it at once
    (``distrs replay`` submits these so); ``benchmarks/sim_vs_live.py`` sets it."""
    options: PolicyOptions = field(default_factory=PolicyOptions)


@dataclass
class BatchOutcome:
    task: str
    iteration: int
    anchor: float
    earliest_completion: float
    completion: float
    estimated_completion: float | None

    @property
    def extra_delay(self) -> float:
        return max(self.completion - self.earliest_completion, 0.0)


@dataclass
class ReplayResult:
    policy: str
    stages: list[str]
    worker_seconds: dict[str, float]
    busy_seconds: dict[str, float]
    batches: list[BatchOutcome]
    planner_s: list[float]
    timeline: dict[str, list[tuple[float, int]]]
    decisions: list[tuple[float, dict[str, int]]]
    end_time: float
    ledger: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per stage, the allocated worker-seconds that were not busy, by reason (``sim/ledger.py``)."""
    debug: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The ``policies.NAME`` object of ``distrs bench scaling --json``."""
        d = np.array([b.extra_delay for b in self.batches]) if self.batches else np.zeros(1)
        p = np.array(self.planner_s) if self.planner_s else np.zeros(1)
        return {
            "worker_seconds": {k: round(v, 3) for k, v in self.worker_seconds.items()},
            "busy_seconds": {k: round(v, 3) for k, v in self.busy_seconds.items()},
            "extra_delay_s": {
                "mean": round(float(d.mean()), 4),
                "p50": round(float(np.percentile(d, 50)), 4),
                "p99": round(float(np.percentile(d, 99)), 4),
                "max": round(float(d.max()), 4),
            },
            "batches": len(self.batches),
            "planner_s": {"mean": round(float(p.mean()), 5), "max": round(float(p.max()), 5)},
            "ledger": {k: {part: round(v, 1) for part, v in d.items()} for k, d in self.ledger.items()},
        }


class _Pool:
    """Workers of one stage (one task's, for dedicated pools)."""

    __slots__ = ("busy", "draining", "idle", "ledger", "queue", "stage", "starting")

    def __init__(self, stage: int, ledger: StageLedger) -> None:
        self.stage = stage
        self.ledger = ledger
        self.idle = IdleWorkers(ledger)
        self.busy = 0
        self.draining = 0
        self.starting: dict[int, float] = {}
        self.queue: list[tuple[float, int, int]] = []

    def size(self) -> int:
        return len(self.idle) + self.busy + len(self.starting)


class _Replay:
    def __init__(
        self, trace: Trace, params: ClusterParams, on_decision: Callable[[float, Decision], None] | None
    ) -> None:
        self.trace = trace
        self.p = params
        self.on_decision = on_decision
        self.stages = list(trace.stages)
        self.names = [s.name for s in self.stages]
        m = len(self.stages)
        # Requests grouped by batch (task, iteration), arrival order inside a batch.
        order = np.lexsort((trace.arrival, trace.iteration, trace.task))
        self.arr0 = trace.arrival[order]
        self.S = trace.s[order]
        if params.empty_request_s > 0 and m:
            empty = ~(self.S > 0).any(axis=1)
            if empty.any():
                self.S = self.S.copy()
                self.S[empty, 0] = params.empty_request_s
        task = trace.task[order]
        it = trace.iteration[order]
        key = task * (int(it.max()) + 1 if it.size else 1) + it
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=int)
        ends = np.r_[starts[1:], key.size].astype(int)
        self.b_lo, self.b_hi = starts.tolist(), ends.tolist()
        self.b_task = task[starts].tolist()
        self.b_iter = it[starts].tolist()
        self.b_rs0 = trace.rollout_start[order][starts].tolist()
        t_req = self.arr0 + self.S.sum(axis=1)
        self.b_T0 = [float(t_req[lo:hi].max()) for lo, hi in zip(self.b_lo, self.b_hi, strict=True)]
        nb = len(self.b_lo)
        self.req_batch = np.repeat(np.arange(nb), np.diff(np.r_[starts, key.size])).tolist()
        self.b_next: dict[int, int] = {}
        by_task: dict[int, list[int]] = {}
        for b in range(nb):
            by_task.setdefault(self.b_task[b], []).append(b)
        for bs in by_task.values():
            bs.sort(key=lambda b: self.b_iter[b])
            for a, c in itertools.pairwise(bs):
                self.b_next[a] = c
        self.first_of_task = [bs[0] for bs in by_task.values()]
        self.s_list = self.S.tolist()
        self.first_stage = [next((k for k in range(m) if row[k] > 0), -1) for row in self.s_list]
        # Mutable state.
        n = self.arr0.size
        self.phase = [0] * n  # 0 not arrived, 1 queued, 2 running, 3 done
        self.at_stage = [-1] * n
        self.started = [0.0] * n
        self.arr = [0.0] * n  # shifted arrival
        self.b_shift = [0.0] * nb
        self.b_done = [0] * nb
        self.b_finished: list[list[int]] = [[] for _ in range(nb)]  # requests, in finishing order
        self.b_arrived = [0] * nb
        self.b_est: list[float | None] = [None] * nb
        self.b_queued = [[0] * m for _ in range(nb)]
        self.b_running: list[list[dict[int, float]]] = [[{} for _ in range(m)] for _ in range(nb)]
        self.active: dict[int, None] = {}
        self.task_shift: dict[int, float] = {}
        self.histories: dict[str, list[BatchProfile]] = {}
        self.pools: dict[tuple[int, int], _Pool] = {}
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.token = 0
        self.count = [0] * m
        self.last_t = [0.0] * m
        self.alloc = [0.0] * m
        self.busy_s = [0.0] * m
        self.ledgers = [StageLedger() for _ in range(m)]
        self.timeline: list[list[tuple[float, int]]] = [[(0.0, 0)] for _ in range(m)]
        self.outcomes: list[BatchOutcome] = []
        self.planner_s: list[float] = []
        self.decisions: list[tuple[float, dict[str, int]]] = []
        self.last_replicas: dict[str, int] | None = None
        self.last_search: dict[str, int] | None = None
        self.now = 0.0
        self.dedicated = params.policy == "zq-dedicated"
        self.tick_pending = False

    # --- bookkeeping -------------------------------------------------------------------------
    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def _count(self, k: int, t: float, delta: int) -> None:
        self.alloc[k] += self.count[k] * (t - self.last_t[k])
        self.last_t[k] = t
        self.count[k] += delta
        self.timeline[k].append((t, self.count[k]))

    def _pool(self, task: int, k: int) -> _Pool:
        key = (task if self.dedicated else -1, k)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = _Pool(k, self.ledgers[k])
        return pool

    # --- workers -----------------------------------------------------------------------------
    def _set_target(self, pool: _Pool, n: int, t: float, up_only: bool = False) -> None:
        k = pool.stage
        current = pool.size() - pool.draining
        if up_only:
            n = max(n, current)
        if n > current:
            add = n - current
            keep = min(pool.draining, add)
            pool.draining -= keep
            add -= keep
            for _ in range(add):
                self.token += 1
                ready = t + self.p.cold_start_s
                pool.starting[self.token] = ready
                self._push(ready, _READY, self.token, id(pool))
            if add:
                self._count(k, t, add)
        elif n < current:
            rem = current - n
            if pool.starting and rem:
                latest = sorted(pool.starting, key=pool.starting.__getitem__, reverse=True)[:rem]
                for tok in latest:
                    pool.ledger.startup += t - (pool.starting.pop(tok) - self.p.cold_start_s)
                self._count(k, t, -len(latest))
                rem -= len(latest)
            if pool.idle and rem:
                gone = min(len(pool.idle), rem)
                pool.idle.remove(gone, t)
                self._count(k, t, -gone)
                rem -= gone
            pool.draining += rem  # busy workers retire when their request is done

    def _dispatch(self, pool: _Pool, t: float) -> None:
        k = pool.stage
        while pool.idle and pool.queue:
            _, _, i = heapq.heappop(pool.queue)
            pool.idle.take(t)
            pool.busy += 1
            b = self.req_batch[i]
            self.b_queued[b][k] -= 1
            self.b_running[b][k][i] = t
            self.phase[i] = 2
            self.started[i] = t
            s = self.s_list[i][k]
            self.busy_s[k] += s
            handoff = self._handoff(s)
            pool.ledger.handoff += handoff
            self._push(t + s + handoff, _DONE, i, k)

    def _handoff(self, s: float) -> float:
        """The hand-off share of one stage visit of run time ``s`` (see ``ClusterParams``)."""
        if not self.p.handoff_s:
            return 0.0
        return self.p.handoff_s / bundle_size(s, self.p.bundle_target_s, self.p.max_bundle)

    def _enqueue(self, i: int, k: int, t: float) -> None:
        b = self.req_batch[i]
        self.phase[i] = 1
        self.at_stage[i] = k
        self.b_queued[b][k] += 1
        est = self.b_est[b]
        prio = (est if est is not None else float("inf")) if self.p.queue_policy is QueuePolicy.EBF else 0.0
        self.seq += 1
        pool = self._pool(self.b_task[b], k)
        heapq.heappush(pool.queue, (prio, self.seq, i))
        self._dispatch(pool, t)

    # --- planner -----------------------------------------------------------------------------
    def _context(self, t: float) -> PlanContext:
        batches = []
        knows = self.p.policy == "ideal" or self.p.options.knowledge != "estimate"
        oracle: list[OracleBatch] | None = [] if knows else None
        m = len(self.names)
        for b in self.active:
            batches.append(
                ActiveBatch(
                    task=self.trace.task_names[self.b_task[b]],
                    batch_id=str(self.b_iter[b]),
                    reward_type=self.p.reward_type,
                    size=self.b_hi[b] - self.b_lo[b],
                    anchor=self.b_rs0[b] + self.b_shift[b],
                    submitted=self.b_arrived[b],
                    queued={self.names[k]: c for k, c in enumerate(self.b_queued[b]) if c},
                    running_elapsed={
                        self.names[k]: [t - st for st in r.values()]
                        for k, r in enumerate(self.b_running[b])
                        if r
                    },
                    finished=self._finished_sample(b),
                )
            )
            if oracle is not None:
                lo, hi = self.b_lo[b], self.b_hi[b]
                phase = np.array(self.phase[lo:hi])
                stage = np.array(self.at_stage[lo:hi])
                started = np.array(self.started[lo:hi])
                S = self.S[lo:hi].copy()
                arrival = self.arr0[lo:hi] + self.b_shift[b]
                first = np.zeros(hi - lo, dtype=np.int64)
                here = phase == 1
                run = phase == 2
                both = here | run
                first[both] = stage[both]
                before = np.arange(m)[None, :] < stage[:, None]
                S[both[:, None] & before] = 0.0  # stages already passed
                rows = np.flatnonzero(run)
                S[rows, stage[rows]] = started[rows] + self.S[lo:hi][rows, stage[rows]] - t
                arrival = np.where(both, t, arrival)
                keep = phase < 3
                oracle.append(
                    OracleBatch(
                        key=(batches[-1].task, batches[-1].batch_id),
                        reward_type=self.p.reward_type,
                        earliest_completion=self.b_T0[b] + self.b_shift[b],
                        arrival=arrival[keep],
                        service=S[keep],
                        first_stage=first[keep],
                        running=run[keep],
                    )
                )
        opts = self.p.options
        if self.last_replicas is not None and self.p.policy in ("distrs", "history", "ideal"):
            opts = replace(opts, warm_start=self.last_replicas, search_hint=self.last_search)
        if opts.scale_down_margin_s is None:
            opts = replace(opts, scale_down_margin_s=self.p.cold_start_s)
        if opts.scale_up_lookahead_s is None and self.p.replan_interval_s:
            opts = replace(opts, scale_up_lookahead_s=self.p.replan_interval_s + self.p.cold_start_s)
        return PlanContext(
            now=t,
            stages=self.stages,
            batches=batches,
            histories=self.histories,
            max_extra_delay_s=self.p.max_extra_delay_s,
            max_replicas=self.p.max_replicas,
            policy=self.p.policy,
            options=opts,
            oracle=oracle,
        )

    def _finished_sample(self, b: int) -> list[dict[str, float]]:
        """What the store's snapshot shows: up to FINISHED_SAMPLE finished requests' s_j. Every
        batch here has one reward type, so once any task has history the planner never reads
        it (``collect.profile_arrays``), and a decision does not pay for building it."""
        if self.histories:
            return []
        pick = finished_sample(sorted(self.b_finished[b]))  # submission order, as the store
        return [{n: s for n, s in zip(self.names, self.s_list[i], strict=True) if s > 0} for i in pick]

    def _decide(self, t: float, scale_up_only: bool = False) -> None:
        ctx = self._context(t)
        t0 = time.perf_counter()
        dec = plan(ctx)
        self.planner_s.append(time.perf_counter() - t0)
        self.last_replicas = dict(dec.replicas)
        self.last_search = dec.debug.get("search")
        self.decisions.append((t, dict(dec.replicas)))
        name_to_b = {(self.trace.task_names[self.b_task[b]], str(self.b_iter[b])): b for b in self.active}
        for key, est in dec.estimated_completion.items():
            b = name_to_b.get(key)
            if b is not None and self.b_est[b] is None:
                self.b_est[b] = est
        if self.dedicated:
            per_task = dec.dedicated or {}
            tasks = {task for task, _ in self.pools} | {self.b_task[b] for b in self.active}
            for task in tasks:
                if task < 0:
                    continue
                want = per_task.get(self.trace.task_names[task], {})
                for k, name in enumerate(self.names):
                    self._set_target(self._pool(task, k), int(want.get(name, 0)), t, scale_up_only)
        else:
            for k, name in enumerate(self.names):
                self._set_target(self._pool(-1, k), int(dec.replicas.get(name, 0)), t, scale_up_only)
        for pool in self.pools.values():
            self._dispatch(pool, t)
        if self.on_decision is not None:
            self.on_decision(t, dec)

    # --- events ------------------------------------------------------------------------------
    def _schedule_tick(self, t: float) -> None:
        if self.p.replan_interval_s and not self.tick_pending:
            self.tick_pending = True
            self._push(t + self.p.replan_interval_s, _TICK, 0)

    def _hint(self, b: int, t: float) -> None:
        shift = self.b_shift[b]
        for i in range(self.b_lo[b], self.b_hi[b]):
            a = float(self.arr0[i]) + shift
            self.arr[i] = a
            self._push(a, _ARRIVE, i)
        self.active[b] = None
        if self.p.oracle_priority:
            self.b_est[b] = self.b_T0[b] + shift
        self._decide(t)
        self._schedule_tick(t)

    def _arrive(self, i: int, t: float) -> None:
        b = self.req_batch[i]
        self.b_arrived[b] += 1
        k = self.first_stage[i]
        if k < 0:
            self.phase[i] = 3
            self._finish_request(b, i, t)
        else:
            self._enqueue(i, k, t)
        if self.b_arrived[b] == 1 and self.p.decide_on_first_arrival and b in self.active:
            self._decide(t)

    def _done(self, i: int, k: int, t: float) -> None:
        b = self.req_batch[i]
        pool = self._pool(self.b_task[b], k)
        pool.busy -= 1
        if pool.draining:
            pool.draining -= 1
            self._count(k, t, -1)
        else:
            pool.idle.add(t, served=True)
        del self.b_running[b][k][i]
        row = self.s_list[i]
        nxt = next((j for j in range(k + 1, len(row)) if row[j] > 0), -1)
        if nxt >= 0:
            self._enqueue(i, nxt, t)
        else:
            self.phase[i] = 3
            self._finish_request(b, i, t)
        self._dispatch(pool, t)

    def _finish_request(self, b: int, i: int, t: float) -> None:
        self.b_done[b] += 1
        self.b_finished[b].append(i)
        if self.b_done[b] < self.b_hi[b] - self.b_lo[b]:
            return
        T = self.b_T0[b] + self.b_shift[b]
        anchor = self.b_rs0[b] + self.b_shift[b]
        out = BatchOutcome(
            task=self.trace.task_names[self.b_task[b]],
            iteration=self.b_iter[b],
            anchor=anchor,
            earliest_completion=T,
            completion=t,
            estimated_completion=self.b_est[b],
        )
        self.outcomes.append(out)
        del self.active[b]
        lo, hi = self.b_lo[b], self.b_hi[b]
        prof = BatchProfile(
            task=out.task,
            batch_id=str(out.iteration),
            anchor=anchor,
            requests=tuple(
                RequestProfile(self.arr[i] - anchor, dict(zip(self.names, self.s_list[i], strict=True)))
                for i in range(lo, hi)
            ),
            reward_type=self.p.reward_type,
        )
        hist = self.histories.setdefault(out.task, [])
        hist.append(prof)
        del hist[: -self.p.history_window]
        nxt = self.b_next.get(b)
        if nxt is not None and self.trace.mode == "colocated":
            self.b_shift[nxt] = self.b_shift[b] + out.extra_delay
            self._push(self.b_rs0[nxt] + self.b_shift[nxt], _HINT, nxt)
        self._decide(t)

    def run(self) -> ReplayResult:
        for b in range(len(self.b_lo)):
            if self.trace.mode != "colocated" or b in self.first_of_task:
                self._push(self.b_rs0[b], _HINT, b)
        pools_by_id: dict[int, _Pool] = {}
        while self.events:
            t, kind, _, a, c = heapq.heappop(self.events)
            if kind == _TICK and not self.active:
                self.tick_pending = False  # a stale re-plan tick: nothing to do, time stands
                continue
            self.now = t
            if kind == _DONE:
                self._done(a, c, t)
            elif kind == _ARRIVE:
                self._arrive(a, t)
            elif kind == _HINT:
                self._hint(a, t)
            elif kind == _TICK:
                self.tick_pending = False
                if self.active:
                    self._decide(t, scale_up_only=not self.p.replan_scale_down)
                    self._schedule_tick(t)
            else:  # _READY
                if not pools_by_id or c not in pools_by_id:
                    pools_by_id = {id(p): p for p in self.pools.values()}
                pool = pools_by_id[c]
                if a in pool.starting:
                    del pool.starting[a]
                    pool.ledger.startup += self.p.cold_start_s
                    pool.idle.add(t, served=False)
                    self._dispatch(pool, t)
        end = self.now
        for pool in self.pools.values():  # whatever is left counts up to the end
            pool.idle.remove(len(pool.idle), end)
            for ready in pool.starting.values():
                pool.ledger.startup += end - (ready - self.p.cold_start_s)
        for k in range(len(self.names)):
            self._count(k, end, 0)
        return ReplayResult(
            policy=self.p.policy,
            stages=self.names,
            worker_seconds=dict(zip(self.names, self.alloc, strict=True)),
            busy_seconds=dict(zip(self.names, self.busy_s, strict=True)),
            batches=sorted(self.outcomes, key=lambda o: (o.task, o.iteration)),
            planner_s=self.planner_s,
            timeline={n: self.timeline[k] for k, n in enumerate(self.names)},
            decisions=self.decisions,
            end_time=end,
            ledger={n: self.ledgers[k].as_dict() for k, n in enumerate(self.names)},
        )


def replay(
    trace: Trace, params: ClusterParams, on_decision: Callable[[float, Decision], None] | None = None
) -> ReplayResult:
    """Replay ``trace`` through the modelled service under ``params.policy``."""
    return _Replay(trace, params, on_decision).run()
