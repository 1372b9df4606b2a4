"""The stage worker: pull a lease, run the stage handler, heartbeat meanwhile, report back.

* ``run_once()`` handles at most one lease and returns, so tests drive the loop step by step.
* ``request_drain()`` (wired to SIGTERM) lets the current lease finish and takes no new one; a
  Kubernetes scale-down therefore never kills work (the chart's grace period ≥ stage timeout).
* A handler exception, or a reward type this worker cannot serve (e.g. ``cuda`` on a worker with
  no GPU), ends the request ``internal_error`` with the reason: never blamed on the model.
* Readiness is the conjunction of the handlers' ``ready()`` for the reward types it serves.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distrs.core.model import Status
from distrs.core.stages import PipelineTable
from distrs.rewards.base import StageHandler, StageInput, StageOutput
from distrs.rewards.registry import get_handler, registered
from distrs.worker.proxy_client import LeaseRejected, ProxyClient, ProxyUnavailable

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerStats:
    leases: int = 0
    completed: int = 0
    rejected: int = 0
    errors: int = 0
    released: int = 0  # leases given back unworked while draining
    busy_s: float = 0.0
    last_error: str | None = None
    by_status: dict[str, int] = field(default_factory=dict)


class Worker:
    def __init__(
        self,
        stage: str,
        client: ProxyClient,
        table: PipelineTable,
        worker_id: str | None = None,
        reward_types: list[str] | None = None,
        wait_s: float = 5.0,
        heartbeat_s: float = 5.0,
        handler_for: Callable[[str, str], StageHandler] = get_handler,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if stage not in table.stages:
            raise ValueError(f"unknown stage {stage!r}; known: {', '.join(table.stages)}")
        self.stage = stage
        self.client = client
        self.table = table
        self.worker_id = worker_id or default_worker_id()
        serving = [t for t, rt in table.reward_types.items() if stage in rt.stages]
        self.reward_types = [t for t in (reward_types or serving) if t in serving]
        self.wait_s = wait_s
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.stats = WorkerStats()
        self._draining = threading.Event()
        self._handlers: dict[str, StageHandler] = {}
        known = registered()
        for t in self.reward_types:
            if (t, stage) in known:
                self._handlers[t] = handler_for(t, stage)
        self.busy = False

    # readiness -------------------------------------------------------------------------------
    def readiness(self) -> tuple[bool, str]:
        if self._draining.is_set():
            return False, "draining"
        if not self._handlers:
            return False, f"no handler for stage {self.stage!r} among {self.reward_types}"
        reasons = []
        for t, h in self._handlers.items():
            ok, why = h.ready()
            if not ok:
                reasons.append(f"{t}: {why}")
        return (not reasons), "; ".join(reasons)

    def request_drain(self) -> None:
        self._draining.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    # the loop --------------------------------------------------------------------------------
    def run(self, idle_backoff_s: float = 1.0) -> None:
        while not self._draining.is_set():
            ok, why = self.readiness()
            if not ok:
                log.warning("worker %s not ready: %s", self.worker_id, why)
                self._draining.wait(idle_backoff_s * 5)
                continue
            try:
                self.run_once()
            except ProxyUnavailable as exc:
                self.stats.last_error = str(exc)
                log.warning("proxy unavailable: %s", exc)
                self._draining.wait(idle_backoff_s)

    def run_once(self) -> bool:
        """Lease and finish at most one request; True when one was handled."""
        lease = self.client.lease(self.stage, self.worker_id, self.wait_s)
        if lease is None:
            return False
        if self._draining.is_set():
            # Told to stop while it waited: the planner has already counted this worker out,
            # so the request goes back to the queue for one it still counts.
            self._give_back(lease["lease_id"])
            return False
        self.stats.leases += 1
        self.busy = True
        try:
            self._handle(lease)
        finally:
            self.busy = False
        return True

    def _give_back(self, lease_id: str) -> None:
        try:
            self.client.release(lease_id, self.worker_id)
            self.stats.released += 1
        except (LeaseRejected, ProxyUnavailable) as exc:  # it expires and is requeued instead
            log.warning("could not give back lease %s: %s", lease_id, exc)

    def _handle(self, lease: dict[str, Any]) -> None:
        stop_hb = threading.Event()
        hb = threading.Thread(target=self._heartbeat, args=(lease["lease_id"], stop_hb), daemon=True)
        hb.start()
        t0 = self.clock()
        try:
            out = self._run_handler(lease)
        finally:
            stop_hb.set()
        run_s = self.clock() - t0
        self.stats.busy_s += run_s
        body: dict[str, Any] = {"worker_id": self.worker_id, "outcome": out.outcome, "run_s": run_s}
        if out.outcome == "next":
            body["artifacts"] = out.artifacts
        else:
            status = out.status or Status.INTERNAL_ERROR
            body["result"] = {"status": status.value, "score": out.score, "detail": out.detail}
            self.stats.by_status[status.value] = self.stats.by_status.get(status.value, 0) + 1
        for attempt in range(5):
            try:
                self.client.complete(lease["lease_id"], body)
                self.stats.completed += 1
                return
            except LeaseRejected as exc:  # expired and requeued meanwhile: the requeued copy wins
                self.stats.rejected += 1
                log.warning("completion of lease %s rejected: %s", lease["lease_id"], exc)
                return
            except ProxyUnavailable as exc:
                self.stats.last_error = str(exc)
                time.sleep(min(2.0, 0.2 * 2**attempt))
        log.error("could not report lease %s; it will expire and be requeued", lease["lease_id"])

    def _run_handler(self, lease: dict[str, Any]) -> StageOutput:
        rt = lease["reward_type"]
        handler = self._handlers.get(rt)
        if handler is None:
            return StageOutput.final(
                Status.INTERNAL_ERROR,
                0.0,
                error=f"worker {self.worker_id} cannot serve {rt!r} at {self.stage!r}",
            )
        ok, why = handler.ready()
        if not ok:
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=f"worker not ready for {rt!r}: {why}")
        inp = StageInput(
            request_id=lease["request_id"],
            task=lease["task"],
            reward_type=rt,
            stage=self.stage,
            payload=lease["payload"],
            artifacts=lease.get("artifacts") or {},
            timeout_s=self.table.stages[self.stage].timeout_s,
        )
        try:
            return handler.run(inp)
        except Exception as exc:  # a handler bug is ours, not the model's
            self.stats.errors += 1
            log.exception("handler %s/%s failed", rt, self.stage)
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=f"{type(exc).__name__}: {exc}")

    def _heartbeat(self, lease_id: str, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat_s):
            try:
                self.client.heartbeat(lease_id, self.worker_id)
            except (ProxyUnavailable, LeaseRejected) as exc:
                log.warning("heartbeat for %s failed: %s", lease_id, exc)
