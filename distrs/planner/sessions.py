"""The session pool's planner: the store's view of sessions in, session workers out.

Every ``interval_s`` it reads the session store (``SessionStats``), keeps the demand of the last
window, sizes the pool (``scaling/session_pool.py``, pure) and asks the actuator for that many
workers of the ``sessions`` pool (the local host's count of session workers; on Kubernetes the
replicas of the session-worker Deployment, ``deployment_prefix + "sessions"``). A store or
actuator failure is logged and retried at the next tick: the pool keeps its size meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from distrs.actuators.base import Actuator
from distrs.config import SessionSettings
from distrs.metrics import SessionMetrics
from distrs.scaling.session_pool import PoolDemand, PoolShape, pool_size, trim
from distrs.store.sessions.base import SessionStats, SessionStore

log = logging.getLogger(__name__)
POOL = "sessions"  # the actuator's name of the session-worker pool


def demand_of(stats: SessionStats, now: float) -> PoolDemand:
    holding = sum(1 for n in stats.open_by_worker.values() if n > 0)
    return PoolDemand(
        now=now, open=stats.open, opening=stats.opening, busy_sessions=stats.busy_sessions, holding=holding
    )


def shape_of(s: SessionSettings, window_s: float) -> PoolShape:
    return PoolShape(
        per_worker=s.per_worker,
        exec_slots=s.exec_slots_per_worker,
        headroom=s.headroom,
        min_workers=s.min_workers,
        max_workers=s.max_workers,
        window_s=window_s,
    )


class SessionPoolPlanner:
    def __init__(
        self,
        store: SessionStore,
        actuator: Actuator,
        settings: SessionSettings,
        metrics: SessionMetrics | None = None,
        clock: Callable[[], float] = time.time,
        interval_s: float = 1.0,
        window_s: float = 60.0,
    ) -> None:
        self.store, self.actuator, self.settings = store, actuator, settings
        self.metrics, self.clock = metrics, clock
        self.interval_s, self.window_s = interval_s, window_s
        self.history: list[PoolDemand] = []
        self.size: int | None = None

    async def decide(self) -> int:
        now = self.clock()
        self.history = trim([*self.history, demand_of(await self.store.stats(now), now)], now, self.window_s)
        n = pool_size(self.history, shape_of(self.settings, self.window_s))
        if n != self.size:
            log.info("session pool: %s -> %d workers", self.size, n)
        await self.actuator.set_replicas(POOL, n)
        self.size = n
        if self.metrics is not None:
            self.metrics.pool_desired.set(n)
        return n

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.decide()
            except Exception as exc:  # the store or the actuator: next tick
                log.warning("session pool planner: %s: %s", type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
