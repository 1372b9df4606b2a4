"""Jails started ahead of their request, while the worker is idle.

A compile request starts two jailed interpreters that import torch before anything else: the
candidate's import (``import_candidate.py``) and the clean build of its ``load_inline`` call
(``build_call.py``). Each start is a jail and a torch import, seconds of CPU on the request's
critical path. So a compile handler keeps one of each ready: started in the background when the
worker is idle (a worker checks its handlers' readiness before each lease it waits for, and that
check starts what is missing), each in a session of its own, its child blocked on its first stdin
line with torch imported. A request takes the ready
one, or starts one then and there where none is (the first request, a second build of one
request, a child that died while it waited).

A ready jail holds a session (a tmpfs, a pool uid) and an interpreter with torch loaded (a few
hundred MB) per kind and compile worker; ``DISTRS_KERNELS_PRESTART=false`` starts every jail at
its request instead. Nothing of a request is in a jail before it is taken: the candidate's source
is written and the job sent after.

bwrap ends a jail when the thread that started it ends (its parent-death signal is per thread):
ready jails are started on this module's executor threads, which live as long as the process,
and a jail started at its request on the request's thread.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field

from distrs.rewards.kernelbench.jailed import JailedChild
from distrs.sandbox.base import Helper, Session

log = logging.getLogger(__name__)

_EXECUTOR = ThreadPoolExecutor(max_workers=32, thread_name_prefix="kb-warm")


@dataclass
class Jail:
    """A started jail: its session (open until :meth:`close`), its helper and the helper's pipes."""

    session: Session
    helper: Helper
    child: JailedChild
    stack: ExitStack = field(repr=False)

    def alive(self) -> bool:
        return self.helper.proc.poll() is None

    def close(self) -> None:
        with suppress(Exception):
            self.child.close()
        with suppress(Exception):
            self.stack.close()


Starter = Callable[[str], Jail]


class WarmJails:
    """At most one ready jail per kind; ``start(kind)`` makes one."""

    def __init__(self, start: Starter, *, enabled: bool) -> None:
        self._start = start
        self.enabled = enabled
        self._lock = threading.Lock()
        self._ready: dict[str, Future[Jail]] = {}
        self.taken_warm = 0  # requests served by a jail started ahead (tests and metrics read it)
        atexit.register(_close_ref, weakref.ref(self))

    def take(self, kind: str) -> Jail:
        """A live jail of ``kind``: the ready one, else one started now (in the calling thread,
        which outlives its use)."""
        with self._lock:
            ready = self._ready.pop(kind, None)
        if ready is not None:
            try:
                jail = ready.result()
            except Exception as e:
                log.warning("a %s jail started ahead failed: %s", kind, e)
            else:
                if jail.alive():
                    self.taken_warm += 1
                    return jail
                jail.close()
        return self._start(kind)

    def refill(self, *kinds: str) -> None:
        """Start the missing ready jails in the background."""
        if not self.enabled:
            return
        with self._lock:
            for kind in kinds:
                if kind not in self._ready:
                    self._ready[kind] = _EXECUTOR.submit(self._start, kind)

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until the jails being started ahead are started (benchmarks measure a request
        that finds them ready, as one to an idle worker does)."""
        with self._lock:
            pending = list(self._ready.values())
        for f in pending:
            with suppress(Exception):
                f.result(timeout_s)

    def close(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, {}
        for f in ready.values():
            f.add_done_callback(_close_started)


def _close_started(f: Future[Jail]) -> None:
    if f.exception() is None:
        f.result().close()


def _close_ref(ref: weakref.ref[WarmJails]) -> None:
    warm = ref()
    if warm is not None:
        warm.close()
