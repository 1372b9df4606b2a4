"""The planner process: store events in, scaling decision, replicas out through the actuator.

It re-plans on every batch registration (the rollout-start hint), first arrival and batch
completion, and at least every ``interval_s``; the pure policy (``distrs.scaling.policies.plan``)
runs in a thread so the event loop (and an in-process proxy) keeps serving meanwhile. It also
accounts allocated worker-seconds per stage from the actuator's ready replicas.

A store that cannot be reached (at start-up or later) never ends the loop: the planner waits
``store_retry_s`` and tries again, and ``ready`` is false (with the reason in ``not_ready``) until
a decision goes through again, which is what the planner's ``/readyz`` reports. On Kubernetes
that is a pod that waits for Redis instead of one that crash-loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from distrs.actuators.base import Actuator
from distrs.config import PlannerSettings
from distrs.core.stages import PipelineTable
from distrs.metrics import Metrics
from distrs.planner.context import build_context
from distrs.scaling.context import Decision, PlanContext, PolicyOptions
from distrs.store.base import QueueStore

log = logging.getLogger(__name__)
TRIGGERS = {"batch_registered", "first_arrival", "batch_completed"}
PlanFn = Callable[[PlanContext], Decision]


def _default_plan() -> PlanFn:
    from distrs.scaling.policies import plan

    return plan


class Planner:
    def __init__(
        self,
        store: QueueStore,
        actuator: Actuator,
        table: PipelineTable,
        settings: PlannerSettings,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        plan_fn: PlanFn | None = None,
        on_plan: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.store, self.actuator, self.table, self.settings = store, actuator, table, settings
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.plan_fn = plan_fn or _default_plan()
        self.on_plan = on_plan
        self.known_tasks: set[str] = set()
        self.last: Decision | None = None
        self.allocated_s: dict[str, float] = {}
        self._last_account: float | None = None
        self._last_event = "0"
        self._previous: dict[str, int] = {}
        self._last_trigger, self._last_took = "", 0.0
        self.ready = False
        self.not_ready = "no decision yet"

    def options(self) -> PolicyOptions:
        return PolicyOptions(
            static_replicas=self.settings.static_replicas,
            default_span_s=self.settings.default_batch_span_s,
            default_first_s=self.settings.default_first_arrival_s,
            warm_start=dict(self._previous) or None,
            search_hint=(self.last.debug.get("search") if self.last is not None else None) or None,
            scale_down_margin_s=self.settings.scale_down_margin_s,
            scale_up_lookahead_s=self.settings.scale_up_lookahead_s,
            timeout_check=self.settings.timeout_check,
            learn_min_finished=self.settings.learn_min_finished,
        )

    async def decide(self, trigger: str) -> Decision:
        now = self.clock()
        ctx = await build_context(
            self.store,
            self.table,
            now,
            self.settings.policy,
            self.settings.max_extra_delay_s,
            self.settings.max_replicas,
            self.options(),
        )
        self.known_tasks |= {b.task for b in ctx.batches}
        extra = {t: await self.store.history(t) for t in self.known_tasks - set(ctx.histories)}
        if extra:
            ctx = dataclasses.replace(ctx, histories={**ctx.histories, **extra})
        t0 = time.perf_counter()
        decision = await asyncio.to_thread(self.plan_fn, ctx)
        took = time.perf_counter() - t0
        self.metrics.planner_decision_seconds.observe(took)
        self.metrics.planner_decisions.labels(trigger).inc()
        for stage in self.table.stages:
            n = decision.replicas.get(stage, 0)
            n = max(self.settings.min_replicas, min(self.settings.max_replicas, n))
            decision.replicas[stage] = n
            try:
                await self.actuator.set_replicas(stage, n)
            except Exception as exc:  # the actuator is expected not to raise; never die for it
                self.metrics.actuator_errors.labels(stage, type(exc).__name__).inc()
                log.exception("actuator failed to scale %s to %d", stage, n)
            self.metrics.replicas_desired.labels(stage).set(n)
        self.metrics.planner_estimated_completion.clear()
        if self.metrics.tenant_labels:  # per-batch series name tenants' tasks: opt-in only
            for (task, batch_id), t_est in decision.estimated_completion.items():
                self.metrics.planner_estimated_completion.labels(task, batch_id).set(t_est)
        self._previous = dict(decision.replicas)
        self.last = decision
        self._last_trigger, self._last_took = trigger, took
        self.ready, self.not_ready = True, ""
        if self.on_plan:
            self.on_plan(self.summary(trigger, took))
        log.info("plan (%s) in %.3fs: %s", trigger, took, decision.replicas)
        return decision

    def view(self) -> dict[str, Any] | None:
        """The latest plan with up-to-date allocated worker-seconds (for /v1/stats)."""
        if self.last is None:
            return None
        return self.summary(self._last_trigger, self._last_took)

    def summary(self, trigger: str, took: float) -> dict[str, Any]:
        d = self.last
        return {
            "at": self.clock(),
            "trigger": trigger,
            "policy": self.settings.policy,
            "decision_s": took,
            "replicas": dict(d.replicas) if d else {},
            "estimated_completion": {
                f"{t}/{b}": v for (t, b), v in (d.estimated_completion if d else {}).items()
            },
            "allocated_worker_seconds": dict(self.allocated_s),
        }

    async def account(self) -> None:
        """Add ready-replicas × elapsed time to the allocated worker-seconds per stage."""
        now = self.clock()
        obs = await self.actuator.observe()
        if self._last_account is not None:
            dt = max(0.0, now - self._last_account)
            for stage, rep in obs.items():
                self.allocated_s[stage] = self.allocated_s.get(stage, 0.0) + rep.ready * dt
                self.metrics.worker_seconds_allocated.labels(stage).inc(rep.ready * dt)
        for stage, rep in obs.items():
            self.metrics.replicas_ready.labels(stage).set(rep.ready)
        self._last_account = now

    async def run_once(self, wait_s: float) -> Decision | None:
        """Wait up to ``wait_s`` for events; re-plan if one is a trigger. Returns the decision."""
        events = await self.store.events(self._last_event, wait_s)
        if events:
            self._last_event = events[-1].id
        await self.account()
        triggers = [e.type for e in events if e.type in TRIGGERS]
        if triggers:
            return await self.decide(triggers[-1])
        return None

    def _failed(self, what: str, exc: Exception) -> None:
        self.ready, self.not_ready = False, f"{what} failed: {type(exc).__name__}: {exc}"
        self.metrics.planner_errors.labels(type(exc).__name__).inc()
        log.warning("%s; retrying in %gs", self.not_ready, self.settings.store_retry_s)

    async def start(self, stop: asyncio.Event) -> bool:
        """The first decision, retried every ``store_retry_s`` until it succeeds (True) or
        ``stop`` is set (False)."""
        while not stop.is_set():
            try:
                await self.decide("start")
                return True
            except Exception as exc:  # the store is down (or any other failure): wait, retry
                self._failed("start-up decision", exc)
                await _sleep(stop, self.settings.store_retry_s)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        if not await self.start(stop):
            return
        last = time.monotonic()
        while not stop.is_set():
            try:
                got = await self.run_once(min(1.0, self.settings.interval_s))
                if got is None and time.monotonic() - last >= self.settings.interval_s:
                    await self.decide("interval")
                    last = time.monotonic()
                elif got is not None:
                    last = time.monotonic()
            except Exception as exc:
                self._failed("planner iteration", exc)
                await _sleep(stop, self.settings.store_retry_s)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
