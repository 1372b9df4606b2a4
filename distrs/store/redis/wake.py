"""Local fan-out of the store's pub/sub wake-ups to waiting coroutines (see ``base.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class Waker:
    """Local fan-out of pub/sub notifications to coroutines waiting on a key.

    ``wake(key, n)`` releases at most ``n`` waiters, oldest first: a stage that gained one request
    wakes one idle lease long-poll, not all of them (no thundering herd of empty leases).
    """

    def __init__(self) -> None:
        self._waiters: dict[str, deque[asyncio.Future[None]]] = {}
        self._gen: dict[str, int] = {}

    def generation(self, key: str) -> int:
        return self._gen.get(key, 0)

    def wake(self, key: str, n: int | None = None) -> None:
        self._gen[key] = self._gen.get(key, 0) + 1
        if len(self._gen) > 100_000:  # forget old batches; a lost generation only costs a re-check
            self._gen.clear()
        q = self._waiters.get(key)
        woken = 0
        while q and (n is None or woken < n):
            fut = q.popleft()
            if not fut.done():
                fut.set_result(None)
                woken += 1

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.wake(key)

    async def wait(self, key: str, seen_gen: int | None, timeout_s: float) -> None:
        if seen_gen is not None and seen_gen != self.generation(key):
            return  # something happened since the caller last looked
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        q = self._waiters.setdefault(key, deque())
        q.append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, max(0.0, timeout_s))
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                q.remove(fut)
            if not q and self._waiters.get(key) is q:
                del self._waiters[key]
