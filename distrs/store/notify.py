"""In-process wake-ups for long-polls: waiters park on a key, writers notify the key.

A waiter that misses a notification (it arrived between its check and its wait) still wakes at
its timeout, so correctness never depends on delivery; wake-ups only cut latency.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable


class Notifier:
    def __init__(self) -> None:
        self._events: dict[Hashable, asyncio.Event] = {}

    async def wait(self, key: Hashable, timeout_s: float) -> bool:
        """Wait for ``notify(key)``; True if woken, False on timeout."""
        if timeout_s <= 0:
            return False
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout_s)
            return True
        return False

    def notify(self, key: Hashable) -> None:
        ev = self._events.pop(key, None)
        if ev is not None:
            ev.set()
