"""Spare jails: sessions opened ahead of the creates that will ask for them.

Opening a session forks a jail from the zygote (``sandbox/stateful.py``): about 15-20 ms of one
core, mostly in the kernel (namespaces, mounts, cgroup). A trainer's step asks for all of its
trajectories' sessions at once, so a burst of 120 creates on a 2-core worker queues for a second
or more. The worker therefore keeps spare jails, opened (the same way, by fork from the zygote)
while it is quiet: a create with the default limits takes one, gets its files written and is
answered in milliseconds. How many: as many as creates it served over the last window (the
next step will ask for as many again), at least ``spares_min``, never more than its free
capacity (``scaling/session_pool.spare_target``). A spare has run nothing of anyone: taking one
is the same as opening one. Spares are opened only while no create is in flight (they would
compete with it for the cores) and closed one at a time when the target falls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from distrs.core.sessions import Language
from distrs.sandbox.base import SandboxError
from distrs.sandbox.stateful import StatefulSession
from distrs.scaling.session_pool import spare_target

log = logging.getLogger(__name__)


class Spares:
    def __init__(
        self,
        open_spare: Callable[[Language], StatefulSession],
        room: Callable[[], int],
        quiet: Callable[[], bool],
        *,
        warm_min: int,
        window_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_spare
        self._room = room  # free capacity of the worker, spares not counted
        self._quiet = quiet  # no create in flight
        self.warm_min, self.window_s, self.clock = warm_min, window_s, clock
        self._lock = threading.Lock()
        self._pool: dict[Language, deque[StatefulSession]] = {lang: deque() for lang in Language}
        self._creates: dict[Language, deque[float]] = {lang: deque() for lang in Language}
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distrs-session-spares", daemon=True)
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._pool.values())

    def take(self, language: Language) -> StatefulSession | None:
        """A live spare of ``language``, or None (and the create is counted either way)."""
        now = self.clock()
        with self._lock:
            times = self._creates[language]
            times.append(now)
            while times and now - times[0] > self.window_s:
                times.popleft()
            q = self._pool[language]
            while q:
                s = q.popleft()
                if s.dead is None:
                    self._wake.set()
                    return s
                s.close()
        self._wake.set()
        return None

    def target(self, language: Language) -> int:
        with self._lock:
            times = list(self._creates[language])
            have = sum(len(q) for q in self._pool.values())
        warm = self.warm_min if language is Language.PYTHON else 0
        return spare_target(
            times, self.clock(), self.window_s, warm, max(0, self._room() - have) + self.have(language)
        )

    def have(self, language: Language) -> int:
        with self._lock:
            return len(self._pool[language])

    def _run(self) -> None:
        while not self._stopped.is_set():
            acted = False
            for lang in Language:
                if self._stopped.is_set():
                    return
                target, have = self.target(lang), self.have(lang)
                if have < target and self._quiet():
                    self._add(lang)
                    acted = True
                elif have > target:
                    self._drop(lang)
                    acted = True
            if not acted:
                self._wake.wait(1.0)
                self._wake.clear()

    def _add(self, lang: Language) -> None:
        try:
            s = self._open(lang)
        except (SandboxError, OSError) as e:
            log.warning("could not open a spare %s jail: %s", lang.value, e)
            self._stopped.wait(1.0)
            return
        with self._lock:
            if not self._stopped.is_set():
                self._pool[lang].append(s)
                return
        s.close()

    def _drop(self, lang: Language) -> None:
        with self._lock:
            q = self._pool[lang]
            s = q.pop() if q else None
        if s is not None:
            s.close()

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()
        with self._lock:
            spares = [s for q in self._pool.values() for s in q]
            for q in self._pool.values():
                q.clear()
        for s in spares:
            s.close()
