"""A session-worker host: one process running N session workers as threads, resized over stdin.

As ``host.py`` does for stage workers (the local actuator writes the planner's count to the
host's stdin, one number per line, and reads ``ready N`` back): scaling up starts a thread (or
calls off a drain), scaling down drains the workers holding the fewest sessions first. A drained
worker takes no new session and its thread ends once it holds none (``sessions.py``): the
planner's scale-down never ends a session. EOF or SIGTERM stops every worker, giving their
sessions ``stop_grace_s`` to end before what is left is released (``session_lost``).

On Kubernetes each pod runs one such process with one worker (``--workers 1``); the chart's
termination grace period bounds the drain.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from typing import TextIO

from distrs.config import SessionSettings
from distrs.core.sessions import Language, SessionLimits
from distrs.sandbox import shared
from distrs.sandbox.stateful import StatefulSession
from distrs.worker.resize_control import run_resized, serve_counts
from distrs.worker.session_spares import Spares
from distrs.worker.sessions import HttpSessionClient, SessionWorker

log = logging.getLogger(__name__)


def host_prefix() -> str:
    """A worker id prefix unique to this process's life (a restarted container on the same host
    with the same pid must never be taken for the worker whose sessions died with it)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class SessionHost:
    def __init__(self, make: Callable[[str], SessionWorker], prefix: str | None = None) -> None:
        self._make = make
        self._prefix = prefix or host_prefix()
        self._workers: list[tuple[SessionWorker, threading.Thread]] = []
        self._next = 0
        self._lock = threading.Lock()
        self._closing = False

    def _alive(self) -> list[SessionWorker]:
        return [w for w, t in self._workers if t.is_alive()]

    def live(self) -> list[SessionWorker]:
        """Running workers that take new sessions."""
        with self._lock:
            return [w for w in self._alive() if not w.draining]

    def resize(self, n: int) -> int:
        n = max(0, n)
        with self._lock:
            if self._closing:
                return 0
            live = [w for w in self._alive() if not w.draining]
            draining = [w for w in self._alive() if w.draining]
            for _ in range(n - len(live)):
                if draining:  # still finishing its sessions: call the drain off
                    draining.pop().revive()
                    continue
                self._next += 1
                w = self._make(f"{self._prefix}-s{self._next}")
                t = threading.Thread(target=w.run, name=w.worker_id, daemon=True)
                self._workers.append((w, t))
                t.start()
            if len(live) > n:  # the fewest sessions first, then the newest
                order = sorted(enumerate(live), key=lambda p: (len(p[1].sessions), -p[0]))
                for _, w in order[: len(live) - n]:
                    w.request_drain()
            self._workers = [(w, t) for w, t in self._workers if t.is_alive()]
            return n

    def stop(self, grace_s: float) -> None:
        with self._lock:
            self._closing = True
            workers = list(self._workers)
        stoppers = [threading.Thread(target=w.stop, args=(grace_s,)) for w, _ in workers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()

    def serve(self, commands: TextIO, out: TextIO) -> None:
        serve_counts(commands, out, self.resize, "session host")


def run_session_host(
    make: Callable[[str], SessionWorker], initial: int, control: TextIO | None, grace_s: float
) -> None:
    """Run ``initial`` workers; resize from ``control`` lines if given, else until SIGTERM/SIGINT."""
    host = SessionHost(make)
    run_resized(host.resize, initial, control, lambda: host.stop(grace_s), "session host")


def serve_sessions(
    proxy_url: str,
    token: str | None,
    settings: SessionSettings,
    initial: int,
    control: TextIO | None,
    grace_s: float,
) -> None:
    """``distrs session-worker``: the host's workers over the process's sandbox, sharing one pool
    of spare jails (``session_spares.py``) sized within the host's free capacity."""
    made: list[SessionWorker] = []

    def room() -> int:  # the live workers' capacity less what every worker holds
        live = [w for w in made if not w.draining]
        return settings.per_worker * len(live) - sum(len(w.sessions) for w in made)

    def open_spare(lang: Language) -> StatefulSession:
        return StatefulSession.open(
            shared(), lang, SessionLimits(), default_timeout_s=settings.exec_timeout_s
        )

    spares = Spares(
        open_spare,
        room=room,
        quiet=lambda: all(w.creating == 0 for w in made),
        warm_min=settings.spares_min,
        window_s=settings.spares_window_s,
    )

    def make(worker_id: str) -> SessionWorker:
        w = SessionWorker(
            worker_id,
            HttpSessionClient(proxy_url, token),
            shared,
            capacity=settings.per_worker,
            slots=settings.exec_slots_per_worker,
            poll_wait_s=settings.poll_wait_s,
            spares=spares,
            default_timeout_s=settings.exec_timeout_s,
        )
        made.append(w)
        return w

    try:
        run_session_host(make, initial, control, grace_s)
    finally:
        spares.close()
