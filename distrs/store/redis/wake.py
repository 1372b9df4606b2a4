"""Waiting without polling: the store's pub/sub wake-ups, fanned out to waiting coroutines.

Scripts PUBLISH ``<stage> LF <count>`` on the work channel when a stage queue gains ``count``
requests, and on the result channel the batch key when a result lands (followed by
``COMPLETED`` when the batch completes). One subscriber connection per store object
(``Wakeups``) fans these out to local waiters: at most ``count`` lease long-polls per work message
(no thundering herd), every waiter of a batch per result. Pub/sub is at-most-once, so a waiter
also re-checks after ``wake_poll_s`` at most (and everyone is woken once after the subscription
reconnects), and a per-key generation counter closes the race between a caller's empty read
(a lease, a batch) and its following wait: the part that reads notes the generation first
(``saw_work``, ``saw_result``), and the wait returns at once if it moved since.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrs.store.redis.topology import Topology

log = logging.getLogger(__name__)

# The suffix of the batch key the scripts publish when the batch completes (lua/lib.lua
# complete_batch): waiters for the whole batch wait on that key alone.
COMPLETED = "\ncompleted"


def completed_key(bkey: str) -> str:
    """The wake-up key of ``bkey``'s completion."""
    return bkey + COMPLETED


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


class Wakeups:
    """The subscription to the wake-up channels and the waiters of this store object (module
    docstring)."""

    def __init__(self, topology: Topology, wake_poll_s: float) -> None:
        self.topology = topology
        self.wake_poll_s = wake_poll_s
        self.work = Waker()
        self.results = Waker()
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._closed = False
        self._seen_work: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
            f"distrs_seen_work_{id(self)}", default=None
        )
        self._seen_result: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
            f"distrs_seen_result_{id(self)}", default=None
        )

    async def start(self) -> None:
        self._closed = False
        if self._listener is None:
            self._subscribed = asyncio.Event()
            self._listener = asyncio.create_task(self._listen(), name="distrs-redis-wake")
            # wait (bounded) for the subscription so that no early notification is missed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._subscribed.wait(), 5.0)

    async def close(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None

    # generations seen before a read, and the waits after it ----------------------------------

    def saw_work(self, stage: str) -> None:
        self._seen_work.set((stage, self.work.generation(stage)))

    async def wait_work(self, stage: str, timeout_s: float) -> None:
        seen = self._seen_work.get()
        gen = seen[1] if seen is not None and seen[0] == stage else None
        self._seen_work.set(None)
        await self.work.wait(stage, gen, min(timeout_s, self.wake_poll_s))

    def saw_result(self, key: str, generation: int | None = None) -> None:
        """Before a read of the batch whose wake-up key is ``key`` (the batch key, or its
        ``completed_key``): a wake-up that comes after it, even one handled before the reading
        coroutine resumes, makes the next wait on ``key`` return at once. ``generation``: the
        one read before the read began (default: now)."""
        gen = self.results.generation(key) if generation is None else generation
        self._seen_result.set((key, gen))

    async def wait_result(self, key: str, timeout_s: float) -> None:
        seen = self._seen_result.get()
        gen = seen[1] if seen is not None and seen[0] == key else None
        self._seen_result.set(None)
        await self.results.wait(key, gen, min(timeout_s, self.wake_poll_s))

    # the subscription ----------------------------------------------------------------------

    async def _listen(self) -> None:
        """Subscribe to the wake channels; reconnect with backoff; wake everyone after a gap."""
        keys = self.topology.keys
        work_ch, result_ch = keys.work_channel(), keys.result_channel()
        backoff = 0.05
        first = True
        while not self._closed:
            pubsub = self.topology.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(work_ch, result_ch)
                if not first:
                    # messages published while we were away are lost: let every waiter re-check
                    self.work.wake_all()
                    self.results.wake_all()
                first = False
                self._subscribed.set()
                backoff = 0.05
                async for msg in pubsub.listen():
                    if msg.get("type") != "message":
                        continue
                    if msg["channel"] == work_ch:
                        stage, _, count = msg["data"].rpartition("\n")
                        self.work.wake(stage, int(count) if count.isdigit() else None)
                    else:  # a batch key (a result landed), or one with COMPLETED (it completed)
                        self.results.wake(msg["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection loss, Redis restart, a failover
                log.debug("wake subscription lost: %s", exc)
                await self.topology.connection_lost()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(backoff)  # never spin, however the subscription ended
            backoff = min(backoff * 2, 2.0)
