"""``AsyncRewardClient``: the asyncio client every other entry point is built on.

Submission is fire-and-forget: ``submit`` only appends to an in-memory buffer (thread-safe, no
I/O), and a background flusher posts the buffer as one bulk ``POST /v1/requests`` per batch when it
holds ``max_bulk`` items or ``linger_s`` after its first item, whichever comes first. That keeps
the trainer's cost per rollout to a few microseconds while the service still sees each request
within milliseconds of its rollout finishing (the DistRS request-in model).

Reliability, end to end:

* every call is retried with full-jitter backoff on connection errors, 5xx and 429 (``calls.py``);
* request ids are idempotent on the service, so any retry or re-submission is safe;
* the client keeps a local copy of every request until its result arrives. When the service may
  have lost state (a connection error or 5xx seen, the batch reported unknown, or no progress for
  ``stall_s``) the client re-registers the batch and bulk re-submits every request it has no result
  for; the service reports the ones it still knows as duplicates and re-queues only the unknown
  ones. One bulk round trip replaces a ``GET /v1/requests/{task}/{id}`` probe per request with
  the same outcome;
* results are handed back exactly once per request id, in submission order.

A malformed request rejected by the service (400/409/413/422) does not poison the others that
were coalesced with it: the bulk is split until the offending requests are isolated, and each
becomes an ``invalid`` result carrying the service's error in ``detail["error"]``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import random
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any

from distrs_client.calls import RetryingCall, Sleep
from distrs_client.errors import (
    ACCESS_ERRORS,
    REJECTED_ERRORS,
    STATE_LOSS_ERRORS,
    APIError,
    ClientClosedError,
    DistrsError,
    NotFoundError,
    ResultsTimeoutError,
    ServiceUnavailableError,
)
from distrs_client.local_batches import Batch, Item, Waiter
from distrs_client.models import RewardResult
from distrs_client.retry import RetryPolicy
from distrs_client.transport import HttpxTransport, Transport

#: Clients with a running flusher that nobody has closed yet; closed at interpreter exit.
_LIVE: weakref.WeakSet[AsyncRewardClient] = weakref.WeakSet()
#: At exit, how long a client nobody closed may spend posting what it still buffers.
EXIT_FLUSH_S = 5.0


def _close_live_clients() -> None:
    for client in list(_LIVE):
        with contextlib.suppress(Exception):
            client._close_at_exit(EXIT_FLUSH_S)


atexit.register(_close_live_clients)


class AsyncRewardClient:
    """Asyncio client of the DistRS reward service (HTTP API v1).

    Args:
        url: base URL of the proxy, e.g. ``http://distrs:8000``.
        token: bearer token with the ``trainer`` role (omit for an ``--insecure`` service).
        max_bulk: flush as soon as this many requests are buffered (and the most per POST).
        linger_s: flush this long after the first buffered request at the latest.
        timeout_s: per-HTTP-call timeout (a long-poll adds its own wait on top).
        poll_wait_s: how long one results long-poll may wait on the service.
        stall_s: with no new result for this long, re-submit what the service may have lost.
        max_batches: batches whose local copies are kept (oldest forgotten first).
        retry: retry/backoff policy for connection errors, 5xx and 429.
        transport: replaces the default httpx transport (tests, custom TLS).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        token: str | None = None,
        *,
        max_bulk: int = 512,
        linger_s: float = 0.005,
        timeout_s: float = 30.0,
        poll_wait_s: float = 20.0,
        stall_s: float = 30.0,
        min_poll_interval_s: float = 0.02,
        max_batches: int = 256,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_bulk < 1:
            raise ValueError("max_bulk must be >= 1")
        self._transport: Transport = transport or HttpxTransport(url, token, timeout_s=timeout_s)
        self._max_bulk = max_bulk
        self._linger_s = linger_s
        self._timeout_s = timeout_s
        self._poll_wait_s = poll_wait_s
        self._stall_s = stall_s
        self._min_poll_interval_s = min_poll_interval_s
        self._retry = retry or RetryPolicy()
        self._sleep: Sleep = sleep or asyncio.sleep
        self._rng = rng or random.Random()
        self._call = RetryingCall(self._transport, self._retry, self._sleep, self._rng, lambda: self._closed)
        # Buffer shared with submitting threads; everything else lives on the event loop.
        self._lock = threading.Lock()
        self._buf: deque[Item] = deque()
        self._enqueued = 0
        self._wake_pending = False
        self._handled = 0
        self._batches: dict[tuple[str, str], Batch] = {}  # insertion order = age
        self._awaited: set[tuple[str, str]] = set()
        self._max_batches = max_batches
        self._waiters: list[Waiter] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._full: asyncio.Event | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ public API

    async def start_batch(
        self,
        task: str,
        batch_id: str,
        size: int,
        reward_type: str | None = None,
        *,
        rollout_started_at: float | None = None,
    ) -> None:
        """Register a batch of ``size`` requests; call it when the rollout *starts*.

        It is the hint the service's planner uses to warm workers up before the first request
        arrives. Idempotent: registering the same batch again is a no-op (another size or reward
        type raises :class:`ConflictError`).
        """
        self._check_open()
        self._bind()
        if size < 1:
            raise ValueError("size must be >= 1")
        b = self._batch(task, batch_id)
        b.size, b.reward_type = size, reward_type
        b.rollout_started_at = time.time() if rollout_started_at is None else rollout_started_at
        await self._register(b)

    def submit(
        self, task: str, batch_id: str, request_id: str, reward_type: str, payload: dict[str, Any]
    ) -> None:
        """Queue one request for the service and return at once (no I/O on the caller's thread).

        Safe to call from any thread. ``request_id`` must be unique within ``task``; submitting the
        same id again is a no-op. Errors surface from :meth:`flush` and :meth:`results`.
        """
        if self._closed:
            raise ClientClosedError("client is closed")
        item = Item(task, batch_id, request_id, reward_type, payload)
        with self._lock:
            self._buf.append(item)
            self._enqueued += 1
            n = len(self._buf)
            wake = not self._wake_pending or n == self._max_bulk
            self._wake_pending = True
        if wake:
            self._signal(full=n >= self._max_bulk)

    async def flush(self) -> None:
        """Wait until every request submitted so far was posted; raise the first error seen."""
        self._check_open()
        self._bind()
        errors = await self._wait_handled()
        if errors:
            raise errors[0]

    async def results(self, task: str, batch_id: str, timeout: float | None = None) -> list[RewardResult]:
        """All results of a batch, in submission order, once the batch is complete.

        Waits (long-polling the service) until every request of the batch has a result, or raises
        :class:`ResultsTimeoutError` (with the partial results) after ``timeout`` seconds. Requests
        the service lost are re-submitted from the local copy while waiting.
        """
        self._check_open()
        self._bind()
        deadline = None if timeout is None else time.monotonic() + timeout
        await self._wait_handled()
        key = (task, batch_id)
        b = self._batch(task, batch_id)
        self._awaited.add(key)
        try:
            return await self._gather(b, deadline)
        finally:
            self._awaited.discard(key)

    async def _gather(self, b: Batch, deadline: float | None) -> list[RewardResult]:
        task, batch_id = b.task, b.batch_id
        last_progress = time.monotonic()
        while True:
            if b.error is not None:
                raise b.error
            if b.locally_complete():
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                done = len(b.results)
                raise ResultsTimeoutError(task, batch_id, done, b.size, b.ordered())
            if b.suspect:
                try:
                    await self._reconcile(b)
                except STATE_LOSS_ERRORS:
                    await self._sleep(self._retry.max_delay_s)
                    continue
            wait = min(self._poll_wait_s, 1.0) if b.degraded or b.short_poll else self._poll_wait_s
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - now))
            started = time.monotonic()
            try:
                resp = await self._call(
                    "GET",
                    b.path,
                    params={"wait_s": round(wait, 3)},
                    timeout_s=wait + self._timeout_s,
                    deadline=deadline,
                )
            except NotFoundError:
                if b.size is None:
                    raise
                b.suspect = b.degraded = True  # the service lost the batch: re-register, re-submit
                continue
            except STATE_LOSS_ERRORS:
                b.suspect = True
                continue
            if b.merge(resp.body):
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress >= self._stall_s:
                b.suspect, last_progress = True, time.monotonic()
            if b.server_complete and b.pending:
                b.suspect = True  # the service thinks it is done but never saw some of ours
            elif not b.locally_complete() and time.monotonic() - started < self._min_poll_interval_s:
                await self._sleep(self._min_poll_interval_s)
        out = b.ordered()
        self._batches.pop((task, batch_id), None)
        return out

    async def score(
        self,
        reward_type: str,
        payload: dict[str, Any],
        *,
        task: str = "default",
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> RewardResult:
        """Score one request and wait for its result (a batch of one)."""
        return (
            await self.score_many([(reward_type, payload)], task=task, timeout=timeout, ids=[request_id])
        )[0]

    async def score_many(
        self,
        items: Iterable[tuple[str, dict[str, Any]]],
        *,
        task: str = "default",
        batch_id: str | None = None,
        timeout: float | None = None,
        ids: Iterable[str | None] | None = None,
    ) -> list[RewardResult]:
        """Score ``(reward_type, payload)`` pairs as one batch; results in the same order."""
        items = list(items)
        if not items:
            return []
        batch_id = batch_id or uuid.uuid4().hex
        given = list(ids) if ids is not None else [None] * len(items)
        types = {rt for rt, _ in items}
        await self.start_batch(task, batch_id, len(items), types.pop() if len(types) == 1 else None)
        for i, (rt, payload) in enumerate(items):
            given_id = given[i] if i < len(given) else None
            rid = given_id or f"{batch_id}-{i}"
            self.submit(task, batch_id, rid, rt, payload)
        return await self.results(task, batch_id, timeout)

    async def reward_types(self) -> list[str]:
        """The reward types the service scores (``GET /v1/reward-types``)."""
        self._check_open()
        resp = await self._call("GET", "/v1/reward-types")
        body = resp.body if isinstance(resp.body, dict) else {}
        return sorted(body.get("reward_types") or {})

    async def request_state(self, task: str, request_id: str) -> dict[str, Any] | None:
        """The service's record of one request (``GET /v1/requests/...``), or None if unknown."""
        self._check_open()
        try:
            resp = await self._call("GET", f"/v1/requests/{task}/{request_id}")
        except NotFoundError:
            return None
        return resp.body if isinstance(resp.body, dict) else None

    async def aclose(self) -> None:
        """Post what is still buffered (best effort), stop the flusher and close connections."""
        if self._closed:
            return
        if self._loop is not None:
            with contextlib.suppress(TimeoutError, DistrsError):
                await asyncio.wait_for(self._wait_handled(), self._timeout_s)
        self._closed = True
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self._transport.aclose()
        _LIVE.discard(self)

    def _close_at_exit(self, wait_s: float) -> None:
        """At interpreter exit, for a client nobody closed: post what is buffered within
        ``wait_s`` (best effort), then stop the flusher, so the loop is never torn down with a
        pending task ("Task was destroyed but it is pending!"). Works whether the client's loop
        runs in another thread (the blocking client's, a framework's) or is idle."""
        loop = self._loop
        if self._closed or loop is None or loop.is_closed():
            return

        async def close() -> None:
            try:
                await asyncio.wait_for(self.aclose(), wait_s)
            except BaseException:  # out of time or failed: still leave no task behind
                self._closed = True
                if self._flusher is not None and not self._flusher.done():
                    self._flusher.cancel()
                    with contextlib.suppress(BaseException):
                        await self._flusher
                _LIVE.discard(self)

        if loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(close(), loop)
            with contextlib.suppress(Exception):
                fut.result(wait_s + 2.0)
        else:
            with contextlib.suppress(Exception):
                loop.run_until_complete(close())

    async def __aenter__(self) -> AsyncRewardClient:
        self._bind()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ flusher

    def _bind(self) -> None:
        """Attach to the running event loop and start the flusher (first call only)."""
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake, self._full = asyncio.Event(), asyncio.Event()
        self._flusher = self._loop.create_task(self._run_flusher(), name="distrs-client-flusher")
        _LIVE.add(self)
        with self._lock:
            if self._buf:
                self._wake.set()

    def _signal(self, full: bool) -> None:
        loop = self._loop
        if loop is None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                return  # not bound yet: the buffer is picked up when the loop binds
            self._bind()
            loop = running
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._on_signal(full)
        else:
            loop.call_soon_threadsafe(self._on_signal, full)

    def _on_signal(self, full: bool) -> None:
        assert self._wake is not None and self._full is not None
        self._wake.set()
        if full:
            self._full.set()

    async def _run_flusher(self) -> None:
        assert self._wake is not None and self._full is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self._buf) < self._max_bulk and not self._full.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self._linger_s)
            self._full.clear()
            while True:
                with self._lock:
                    items = list(self._buf)
                    self._buf.clear()
                    self._wake_pending = False
                if not items:
                    break
                errors = await self._post_items(items)
                self._handled += len(items)
                for w in self._waiters:
                    w.errors.extend(errors)
                self._resolve_waiters()

    def _resolve_waiters(self) -> None:
        keep = []
        for w in self._waiters:
            if self._handled >= w.target:
                if not w.future.done():
                    w.future.set_result(w.errors)
            else:
                keep.append(w)
        self._waiters = keep

    async def _wait_handled(self) -> list[DistrsError]:
        assert self._loop is not None
        with self._lock:
            target = self._enqueued
        if self._handled >= target:
            return []
        w = Waiter(target, self._loop.create_future())
        self._waiters.append(w)
        self._on_signal(full=True)
        return await w.future

    async def _post_items(self, items: list[Item]) -> list[DistrsError]:
        groups: dict[tuple[str, str], tuple[Batch, list[dict[str, Any]]]] = {}
        for it in items:
            b = self._batch(it.task, it.batch_id)
            if it.request_id in b.pending or it.request_id in b.results:
                continue  # the same id twice: the first submission stands
            wire = {
                "task": it.task,
                "batch_id": it.batch_id,
                "request_id": it.request_id,
                "reward_type": it.reward_type,
                "payload": it.payload,
            }
            b.order.append(it.request_id)
            b.pending[it.request_id] = wire
            groups.setdefault((it.task, it.batch_id), (b, []))[1].append(wire)
        errors: list[DistrsError] = []
        for b, wires in groups.values():
            for start in range(0, len(wires), self._max_bulk):
                try:
                    await self._post_requests(b, wires[start : start + self._max_bulk])
                except DistrsError as exc:
                    errors.append(exc)
        return errors

    # ------------------------------------------------------------------ service calls

    async def _post_requests(self, b: Batch, wires: list[dict[str, Any]]) -> None:
        """POST one bulk; isolate rejected requests; mark the batch suspect on transient failure."""
        try:
            await self._post_bulk(b, wires)
        except REJECTED_ERRORS as exc:
            if len(wires) > 1:
                mid = len(wires) // 2
                await self._post_requests(b, wires[:mid])
                await self._post_requests(b, wires[mid:])
                return
            b.reject(wires[0]["request_id"], exc)
        except ACCESS_ERRORS as exc:
            b.error = exc
            raise
        except NotFoundError as exc:
            b.error = exc  # batch never registered by anyone within the retry budget
            raise
        except (ServiceUnavailableError, APIError) as exc:
            b.suspect = True  # kept in ``pending``: results() re-submits it
            raise exc

    async def _post_bulk(self, b: Batch, wires: list[dict[str, Any]]) -> None:
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                await self._call("POST", "/v1/requests", body={"requests": wires})
                return
            except NotFoundError as exc:
                if exc.code not in ("unknown_batch", "not_found"):
                    raise
                if b.size is not None:
                    # We own the registration: restore it. If it had to be created anew the
                    # service lost the batch, and with it maybe requests we posted before.
                    if await self._register(b):
                        b.suspect = b.degraded = True
                else:  # registered by another process (e.g. the driver): it may be late
                    delay = self._retry.delay(attempt, self._rng.random(), None)
                    if not self._retry.should_retry(time.monotonic() - start, delay):
                        raise
                    await self._sleep(delay)
                attempt += 1
                if attempt > 64:
                    raise

    async def _register(self, b: Batch) -> bool:
        """(Re-)register the batch; True when the service created it (did not know it)."""
        assert b.size is not None
        body: dict[str, Any] = {"task": b.task, "batch_id": b.batch_id, "size": b.size}
        if b.reward_type is not None:
            body["reward_type"] = b.reward_type
        if b.rollout_started_at is not None:
            body["rollout_started_at"] = b.rollout_started_at
        resp = await self._call("POST", "/v1/batches", body=body)
        return resp.status == 201

    async def _reconcile(self, b: Batch) -> None:
        """Re-register the batch (if ours) and re-submit every request without a result."""
        if b.size is not None and await self._register(b):
            b.degraded = True
        missing = [b.pending[i] for i in b.order if i in b.pending]
        for start in range(0, len(missing), self._max_bulk):
            await self._post_requests(b, missing[start : start + self._max_bulk])
        b.suspect = False
        b.server_complete = False

    # ------------------------------------------------------------------ helpers

    def _batch(self, task: str, batch_id: str) -> Batch:
        key = (task, batch_id)
        b = self._batches.get(key)
        if b is None:
            b = self._batches[key] = Batch(task, batch_id)
            self._evict()
        return b

    def _evict(self) -> None:
        """Forget the oldest batches beyond ``max_batches`` (not those a ``results`` call waits on).

        A process that only submits (a Ray rollout worker whose driver gathers the results) never
        calls ``results``, so without a bound its local copies would grow for ever.
        """
        excess = len(self._batches) - self._max_batches
        if excess <= 0:
            return
        for key in list(self._batches):
            if excess <= 0:
                break
            if key not in self._awaited:
                del self._batches[key]
                excess -= 1

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("client is closed")
