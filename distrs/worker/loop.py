"""The stage worker: pull a lease, run the stage handler, heartbeat meanwhile, report back.

* ``run_once()`` handles at most one lease (or one bundle) and returns, so tests drive the loop
  step by step.
* Bundles: short stages are leased k requests at a time (one lease call, one heartbeat call and
  one completion call for all k, instead of k of each). k adapts to the stage's run time as this
  worker measures it: as many requests as run in about ``bundle_target_s``
  (``core.bundles.bundle_size``), so
  a bundle delays its first result by at most about that much, and a long stage runs k = 1. The
  items run one after another; once a bundle has run for ``bundle_target_s`` the finished items
  are reported and the unstarted ones given back to the queue (so items longer than measured
  neither hold back the others' results nor keep them from idle workers); a lease the proxy refused meanwhile (expired and
  handed to another worker) is skipped, not run; a drain requested mid-bundle gives the
  unstarted items back, so draining never waits for more than the item that is running. A proxy
  without bundle routes makes the worker fall back to one lease per call.
* ``request_drain()`` (wired to SIGTERM) lets the current lease finish and takes no new one; a
  Kubernetes scale-down therefore never kills work (the chart's grace period ≥ stage timeout).
* A handler exception, or a reward type this worker cannot serve (e.g. ``cuda`` on a worker with
  no GPU), ends the request ``internal_error`` with the reason: never blamed on the model.
* Readiness is the conjunction of the handlers' ``ready()`` for the reward types it serves and,
  on a GPU worker, of the GPU's health (``worker.gpu_health``): checked before the first lease and
  after any request that met a CUDA error, whose result becomes ``internal_error`` when the check
  finds the GPU at fault. Each request's run time there is counted as GPU-seconds. Left to serve
  every type of its stage, a worker skips those whose optional extra is not installed (the type's
  descriptor names it, ``RewardType.extra``).
* A handler is given the stage timeout of the request's type (``PipelineTable.timeout_s``: the
  type's own where its descriptor sets one, else the stage's).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distrs.core.bundles import bundle_size
from distrs.core.model import Status
from distrs.core.stages import PipelineTable
from distrs.metrics import WorkerMetrics
from distrs.rewards.base import StageHandler, StageInput, StageOutput
from distrs.rewards.registry import registered
from distrs.worker.gpu_health import GpuGuard
from distrs.worker.proxy_client import LeaseRejected, ProxyClient, ProxyUnavailable

log = logging.getLogger(__name__)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


# Weight of the newest run in the worker's mean run time (exponential moving average).
_RUN_EWMA = 0.2


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
        handler_for: Callable[[str, str], StageHandler] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_bundle: int = 1,
        bundle_target_s: float = 0.25,
        gpu: GpuGuard | None = None,
        metrics: WorkerMetrics | None = None,
        execution_log: str | None = None,
    ) -> None:
        if stage not in table.stages:
            raise ValueError(f"unknown stage {stage!r}; known: {', '.join(table.stages)}")
        self.stage = stage
        self.client = client
        self.table = table
        self.worker_id = worker_id or default_worker_id()
        serving = [t for t, rt in table.reward_types.items() if stage in rt.stages]
        reward_types_defaulted = reward_types is None
        if reward_types is None:  # every type of the stage, less those whose optional extra is missing
            extras = {t: table.reward_types[t].extra for t in serving}
            missing = {
                t: why for t, extra in extras.items() if extra and (why := extra.missing()) is not None
            }
            for t, why in missing.items():
                log.info("worker does not serve %r: %s", t, why)
            reward_types = [t for t in serving if t not in missing]
        self.reward_types = [t for t in reward_types if t in serving]
        self.wait_s = wait_s
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.max_bundle = max(1, max_bundle)
        self.bundle_target_s = bundle_target_s
        self.execution_log = execution_log
        self.mean_run_s: float | None = None
        self.stats = WorkerStats()
        self._draining = threading.Event()
        self._handlers: dict[str, StageHandler] = {}
        known = registered(table)
        for t in self.reward_types:
            if (t, stage) in known:
                self._handlers[t] = known[(t, stage)]() if handler_for is None else handler_for(t, stage)
        if reward_types_defaulted:  # a type whose tool this worker lacks is left out, as above
            for t, h in list(self._handlers.items()):
                absent = getattr(h, "absent", None)
                if absent is not None and (why := absent()) is not None:
                    log.info("worker does not serve %r: %s", t, why)
                    del self._handlers[t]
                    self.reward_types.remove(t)
        self.busy = False
        self.gpu = gpu
        self.metrics = metrics

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
        if self.gpu is not None:
            ok, why = self.gpu.ready()
            if not ok:
                reasons.append(why)
        return (not reasons), "; ".join(reasons)

    def request_drain(self) -> None:
        self._draining.set()

    def revive(self) -> None:
        """Serve again after a drain whose ``run()`` has returned (the host reuses the worker, and
        with it its handlers' warm children, rather than making a new one)."""
        self._draining.clear()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    # the loop --------------------------------------------------------------------------------
    def run(self, idle_backoff_s: float = 1.0) -> None:
        said = None  # the not-ready reason last logged: one line per reason, not one per check
        while not self._draining.is_set():
            if self.gpu is not None:
                self.gpu.maybe_check()  # before the first lease; a sick GPU's periodic re-check
            ok, why = self.readiness()
            if not ok:
                if why != said:
                    log.warning("worker %s not ready: %s", self.worker_id, why)
                    said = why
                self._draining.wait(idle_backoff_s * 5)
                continue
            if said is not None:
                log.info("worker %s ready", self.worker_id)
                said = None
            try:
                self.run_once()
            except ProxyUnavailable as exc:
                self.stats.last_error = str(exc)
                log.warning("proxy unavailable: %s", exc)
                self._draining.wait(idle_backoff_s)

    def run_once(self) -> bool:
        """Lease and finish at most one request or bundle; True when one was handled."""
        if self.gpu is not None:
            self.gpu.maybe_check()
            if not self.gpu.ready()[0]:  # a sick GPU leases nothing
                return False
        k = bundle_size(self.mean_run_s, self.bundle_target_s, self.max_bundle)
        if k > 1:
            return self._run_bundle(k)
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

    def heartbeat_period(self, lease: dict[str, Any]) -> float:
        """The proxy's requested period (a third of its lease TTL) when shorter than ours."""
        asked = lease.get("heartbeat_s")
        if isinstance(asked, int | float) and asked > 0:
            return min(self.heartbeat_s, float(asked))
        return self.heartbeat_s

    def _journal(self, lease: dict[str, Any]) -> None:
        """One line per run, appended before it starts (a run cut short still shows): the
        ``execution_log`` audit of what actually ran. One ``write`` of one line on a file opened
        for appending, so the lines of several workers sharing the file never interleave."""
        assert self.execution_log is not None
        keys = ("task", "request_id", "stage", "attempt", "lease_id")
        line = json.dumps({**{k: lease.get(k) for k in keys}, "worker_id": self.worker_id}) + "\n"
        fd = os.open(self.execution_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def _observe(self, run_s: float) -> None:
        m = self.mean_run_s
        self.mean_run_s = run_s if m is None else (1 - _RUN_EWMA) * m + _RUN_EWMA * run_s

    def _timed_run(self, lease: dict[str, Any]) -> dict[str, Any]:
        """Run one lease's handler; the report for it: outcome, run_s, artifacts or result."""
        if self.execution_log:
            self._journal(lease)
        t0 = self.clock()
        out = self._run_handler(lease)
        run_s = self.clock() - t0
        if self.gpu is not None:
            out = self.gpu.after_request(out)  # a CUDA error: was it the GPU? (checked now)
            if self.metrics is not None:
                self.metrics.request_gpu_seconds.labels(lease["reward_type"]).observe(run_s)
        self.stats.busy_s += run_s
        self._observe(run_s)
        body: dict[str, Any] = {"outcome": out.outcome, "run_s": run_s}
        if out.outcome == "next":
            body["artifacts"] = out.artifacts
        else:
            status = out.status or Status.INTERNAL_ERROR
            body["result"] = {"status": status.value, "score": out.score, "detail": out.detail}
            self.stats.by_status[status.value] = self.stats.by_status.get(status.value, 0) + 1
        return body

    def _handle(self, lease: dict[str, Any]) -> None:
        stop_hb = threading.Event()
        period = self.heartbeat_period(lease)
        hb = threading.Thread(target=self._heartbeat, args=(lease["lease_id"], stop_hb, period), daemon=True)
        hb.start()
        try:
            body = {"worker_id": self.worker_id, **self._timed_run(lease)}
        finally:
            stop_hb.set()
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

    # bundles -----------------------------------------------------------------------------------
    def _run_bundle(self, k: int) -> bool:
        try:
            leases = self.client.lease_bundle(self.stage, self.worker_id, self.wait_s, k)
        except LeaseRejected as exc:
            if exc.status not in (404, 405):
                raise
            log.warning("proxy has no lease bundles (%s); leasing one request per call", exc.status)
            self.max_bundle = 1
            return False
        if not leases:
            return False
        if self._draining.is_set():  # as for one lease: back to the queue, unworked
            for lease in leases:
                self._give_back(lease["lease_id"])
            return False
        self.stats.leases += len(leases)
        self.busy = True
        try:
            self._handle_bundle(leases)
        finally:
            self.busy = False
        return True

    def _handle_bundle(self, leases: list[dict[str, Any]]) -> None:
        live = {lease["lease_id"] for lease in leases}
        lock = threading.Lock()
        stop_hb = threading.Event()
        period = self.heartbeat_period(leases[0])
        hb = threading.Thread(target=self._heartbeat_bundle, args=(live, lock, stop_hb, period), daemon=True)
        hb.start()
        items: list[dict[str, Any]] = []
        flushed = self.clock()
        try:
            for n, lease in enumerate(leases):
                if self._draining.is_set():  # stop soon: the rest goes back to the queue unrun
                    for rest in leases[n:]:
                        with lock:
                            live.discard(rest["lease_id"])
                        self._give_back(rest["lease_id"])
                    break
                with lock:
                    still_ours = lease["lease_id"] in live
                if not still_ours:  # expired and requeued: another worker runs it
                    self.stats.rejected += 1
                    continue
                items.append({"lease_id": lease["lease_id"], **self._timed_run(lease)})
                if self.clock() - flushed >= self.bundle_target_s and n + 1 < len(leases):
                    # Overran the bundle's time (the items are longer than the measured mean,
                    # e.g. a mean set by instant failures): report what is done and give the
                    # unstarted items back, at their place in the queue, so idle workers take
                    # them instead of waiting behind this one; a bundle thus holds a request
                    # unrun for at most about bundle_target_s plus one item.
                    self._complete_bundle(items)
                    items = []
                    with lock:
                        unstarted = [r["lease_id"] for r in leases[n + 1 :] if r["lease_id"] in live]
                        live.clear()
                    for lease_id in unstarted:
                        self._give_back(lease_id)
                    break
        finally:
            stop_hb.set()
        if items:
            self._complete_bundle(items)

    def _complete_bundle(self, items: list[dict[str, Any]]) -> None:
        for attempt in range(5):
            try:
                answers = self.client.complete_bundle(self.worker_id, items)
            except LeaseRejected as exc:  # the whole call refused (a bug of ours): they expire
                self.stats.rejected += len(items)
                log.error("bundle completion rejected: %s", exc)
                return
            except ProxyUnavailable as exc:
                self.stats.last_error = str(exc)
                time.sleep(min(2.0, 0.2 * 2**attempt))
                continue
            for answer in answers:
                if "error" in answer:  # e.g. expired and requeued meanwhile: the requeued copy wins
                    self.stats.rejected += 1
                    log.warning(
                        "completion of lease %s rejected: %s", answer.get("lease_id"), answer["error"]
                    )
                else:
                    self.stats.completed += 1
            return
        log.error("could not report a bundle of %d; its leases will expire and be requeued", len(items))

    def _heartbeat_bundle(
        self, live: set[str], lock: threading.Lock, stop: threading.Event, period: float
    ) -> None:
        while not stop.wait(period):
            with lock:
                ids = sorted(live)
            if not ids:
                return
            try:
                refused = self.client.heartbeat_bundle(ids, self.worker_id)
            except ProxyUnavailable as exc:
                log.warning("bundle heartbeat failed: %s", exc)
                continue
            except LeaseRejected as exc:
                log.warning("bundle heartbeat refused: %s", exc)
                return
            if refused:
                log.warning("heartbeat refused for %d leases of the bundle", len(refused))
                with lock:
                    live.difference_update(refused)

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
            timeout_s=self.table.timeout_s(rt, self.stage),
        )
        try:
            return handler.run(inp)
        except Exception as exc:  # a handler bug is ours, not the model's
            self.stats.errors += 1
            log.exception("handler %s/%s failed", rt, self.stage)
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=f"{type(exc).__name__}: {exc}")

    def _heartbeat(self, lease_id: str, stop: threading.Event, period: float) -> None:
        while not stop.wait(period):
            try:
                self.client.heartbeat(lease_id, self.worker_id)
            except ProxyUnavailable as exc:  # transient: the next beat may get through
                log.warning("heartbeat for %s failed: %s", lease_id, exc)
            except LeaseRejected as exc:
                # expired and requeued (or not ours): another worker has it now; our completion
                # will be refused, so there is nothing left to keep alive
                log.warning("heartbeat for %s refused: %s", lease_id, exc)
                return
