"""A worker host: one process running N stage workers as threads, resized over stdin.

The local actuator runs one host per stage instead of one OS process per worker, so scaling up
costs a thread start (milliseconds) rather than an interpreter start (a second or more of CPU on
a small machine), which a planner that scales at every batch event needs. Each thread is a full
``Worker`` with its own id and lease; handlers that run untrusted code still do so in sandboxed
child processes, so threads share nothing but the interpreter.

Protocol on stdin, one command per line: ``N`` sets the number of workers. Scale-down drains
idle workers first (a busy one finishes its lease before it stops). EOF or SIGTERM drains all
and exits. After each change the host prints ``ready N`` on stdout.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from distrs.worker.loop import Worker

log = logging.getLogger(__name__)


class WorkerHost:
    def __init__(self, make_worker: Callable[[str], Worker], id_prefix: str | None = None) -> None:
        self._make = make_worker
        self._prefix = id_prefix or f"{socket.gethostname()}-{os.getpid()}"
        self._workers: list[tuple[Worker, threading.Thread]] = []
        self._next = 0
        self._lock = threading.Lock()

    def _reap(self) -> None:
        self._workers = [(w, t) for w, t in self._workers if t.is_alive()]

    def live(self) -> list[Worker]:
        with self._lock:
            self._reap()
            return [w for w, _ in self._workers if not w.draining]

    def resize(self, n: int) -> int:
        """Run ``n`` non-draining workers; returns that count."""
        n = max(0, n)
        with self._lock:
            self._reap()
            live = [(w, t) for w, t in self._workers if not w.draining]
            for _ in range(n - len(live)):
                self._next += 1
                w = self._make(f"{self._prefix}-{self._next}")
                t = threading.Thread(target=w.run, name=w.worker_id, daemon=True)
                t.start()
                self._workers.append((w, t))
            if len(live) > n:
                # idle first, then newest first: a busy worker only stops after its lease
                order = sorted(live, key=lambda wt: (wt[0].busy, -self._workers.index(wt)))
                for w, _ in order[: len(live) - n]:
                    w.request_drain()
            return n

    def drain_all(self, timeout_s: float | None = None) -> None:
        with self._lock:
            workers = list(self._workers)
        for w, _ in workers:
            w.request_drain()
        for _, t in workers:
            t.join(timeout_s)

    def serve(self, commands: TextIO, out: TextIO) -> None:
        for line in commands:
            line = line.strip()
            if not line:
                continue
            try:
                n = int(line)
            except ValueError:
                log.error("worker host: bad command %r (expected a number of workers)", line)
                continue
            out.write(f"ready {self.resize(n)}\n")
            out.flush()
        self.drain_all()


class _Stop(Exception):
    pass


def _raise_stop(*_: object) -> None:
    raise _Stop


def run_host(make_worker: Callable[[str], Worker], initial: int = 0, control: TextIO | None = None) -> None:
    """Run ``initial`` workers; resize from ``control`` lines if given, else until SIGTERM/SIGINT."""
    host = WorkerHost(make_worker)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    host.resize(initial)
    try:
        if control is not None:
            host.serve(control, sys.stdout)
        else:
            threading.Event().wait()
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not cut the drain short
        host.drain_all()
