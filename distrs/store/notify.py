"""In-process wake-ups for long-polls: waiters park on a key, writers notify the key.

``notify`` wakes every waiter of a key (a batch's result watchers); ``notify_one`` wakes a single
one (one new queue item needs one worker: waking all of them would make every idle worker race
for it). A waiter that misses a notification (it arrived between its check and its wait) still
wakes at its timeout, so correctness never depends on delivery; wake-ups only cut latency.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Hashable


class Notifier:
    def __init__(self) -> None:
        self._waiters: dict[Hashable, deque[asyncio.Future[None]]] = {}

    async def wait(self, key: Hashable, timeout_s: float) -> bool:
        """Wait for a notification of ``key``; True if woken, False on timeout."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        q = self._waiters.setdefault(key, deque())
        q.append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), timeout_s)
                return True
            return False
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                q.remove(fut)
            if not q and self._waiters.get(key) is q:
                del self._waiters[key]

    def notify(self, key: Hashable) -> None:
        """Wake every waiter of ``key``."""
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def notify_one(self, key: Hashable) -> None:
        """Wake the longest-waiting live waiter of ``key`` (if any)."""
        q = self._waiters.get(key)
        while q:
            fut = q.popleft()
            if not fut.done():
                fut.set_result(None)
                break
        if q is not None and not q:
            self._waiters.pop(key, None)
