"""A worker host: one process running N stage workers as threads, resized over stdin.

The local actuator runs one host per stage instead of one OS process per worker, so scaling up
costs a thread start (milliseconds) rather than an interpreter start (a second or more of CPU on
a small machine), which a planner that scales at every batch event needs. Each thread is a full
``Worker`` with its own id and lease; handlers that run untrusted code still do so in sandboxed
child processes, so threads share nothing but the interpreter.

Protocol on stdin, one command per line: ``N`` sets the number of workers. Scale-down drains
idle workers first (a busy one finishes its lease before it stops). EOF or SIGTERM drains all
and exits. After each change the host prints ``ready N`` on stdout. A drain waits for busy
workers; the lifeline (``distrs/worker/lifeline.py``, wired by ``distrs worker --lifeline-fd``)
is what ends the host at once, with every process it started, when its starter is gone.

A drained worker's thread does not end: it waits, and scale-up revives workers (first those still
finishing their drain, then stopped ones) before it makes new ones. The thread must outlive the
drain because the jail of a warm child (the math checker, which costs about half a CPU-second to
start) dies with the thread that started it (bwrap's ``--die-with-parent`` is a per-thread
parent-death signal); so warm children survive the scale-to-zero between two batches, and the
host never holds more workers than the most it ran at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from distrs.worker.loop import Worker
from distrs.worker.resize_control import run_resized, serve_counts

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    """One worker and the thread that runs it, for the host's whole life (see the docstring)."""

    worker: Worker
    stopped: threading.Event = field(default_factory=threading.Event)  # its run() has returned
    wake: threading.Event = field(default_factory=threading.Event)  # revive (or the host ends)
    thread: threading.Thread | None = None


class WorkerHost:
    def __init__(self, make_worker: Callable[[str], Worker], id_prefix: str | None = None) -> None:
        self._make = make_worker
        self._prefix = id_prefix or f"{socket.gethostname()}-{os.getpid()}"
        self._slots: list[_Slot] = []
        self._stopped_order: list[_Slot] = []  # stopped slots, the most recently stopped last
        self._next = 0
        self._lock = threading.Lock()
        self._closing = False

    def _life(self, slot: _Slot) -> None:
        """Run the worker; once drained, keep the thread (and the children it started) and wait
        to be revived."""
        while True:
            try:
                slot.worker.run()
            except Exception:  # a crashed worker stops, like a drained one, until the next scale-up
                log.exception("worker %s stopped on an error", slot.worker.worker_id)
                slot.worker.request_drain()
            with self._lock:
                if not self._closing and not slot.worker.draining:
                    continue  # its drain was called off while it finished: it serves on
                slot.stopped.set()
                self._stopped_order.append(slot)
            slot.wake.wait()
            slot.wake.clear()
            if self._closing:
                return

    def _running(self) -> list[_Slot]:
        return [s for s in self._slots if not s.stopped.is_set()]

    def live(self) -> list[Worker]:
        with self._lock:
            return [s.worker for s in self._running() if not s.worker.draining]

    def readiness(self) -> tuple[bool, str]:
        """Ready while one running worker is (they share the process's GPU guard, if any)."""
        live = self.live()
        if not live:
            return False, "no workers running"
        answers = [w.readiness() for w in live]
        if any(ok for ok, _ in answers):
            return True, ""
        return False, answers[0][1]

    def stopped(self) -> list[Worker]:
        """Workers drained and stopped, waiting to be revived."""
        with self._lock:
            return [s.worker for s in self._stopped_order]

    def _start(self) -> None:
        draining = [s for s in self._running() if s.worker.draining]
        if draining:  # still finishing (a lease, a long poll): call the drain off
            draining[-1].worker.revive()
            return
        if self._stopped_order:  # revive a stopped worker first: its warm children come with it
            slot = self._stopped_order.pop()
            slot.worker.revive()
            slot.stopped.clear()
            slot.wake.set()
            return
        self._next += 1
        slot = _Slot(self._make(f"{self._prefix}-{self._next}"))
        slot.thread = threading.Thread(
            target=self._life, args=(slot,), name=slot.worker.worker_id, daemon=True
        )
        self._slots.append(slot)
        slot.thread.start()

    def resize(self, n: int) -> int:
        """Run ``n`` non-draining workers; returns that count."""
        n = max(0, n)
        with self._lock:
            if self._closing:
                return 0
            live = [s for s in self._running() if not s.worker.draining]
            for _ in range(n - len(live)):
                self._start()
            if len(live) > n:
                # idle first, then newest first: a busy worker only stops after its lease
                order = sorted(live, key=lambda s: (s.worker.busy, -self._slots.index(s)))
                for s in order[: len(live) - n]:
                    s.worker.request_drain()
            return n

    def drain_all(self, timeout_s: float | None = None) -> None:
        with self._lock:
            self._closing = True
            slots = list(self._slots)
        for s in slots:
            s.worker.request_drain()
            s.wake.set()
        for s in slots:
            if s.thread is not None:
                s.thread.join(timeout_s)

    def serve(self, commands: TextIO, out: TextIO) -> None:
        serve_counts(commands, out, self.resize, "worker host")
        self.drain_all()


def run_host(
    make_worker: Callable[[str], Worker],
    initial: int = 0,
    control: TextIO | None = None,
    on_start: Callable[[WorkerHost], object] | None = None,
) -> None:
    """Run ``initial`` workers; resize from ``control`` lines if given, else until SIGTERM/SIGINT.
    ``on_start`` gets the host first (the CLI serves its /readyz and /metrics from it)."""
    host = WorkerHost(make_worker)
    if on_start is not None:
        on_start(host)
    run_resized(host.resize, initial, control, host.drain_all, "worker host")
