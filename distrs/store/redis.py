"""The production QueueStore: Redis, with every state change in one atomic Lua script.

Why Lua: a lease must pop the head of a queue *and* record who holds it; a completion must record
the stage outcome, move the request on or store its result, count the batch and, for the last
request, fold the batch into the task history and emit an event. Each of those is one script
(``lua/*.lua``, sharing ``lua/lib.lua``), so a crash of the proxy between two steps cannot leave
half of a transition behind, and several proxy processes may share one Redis. Scripts are loaded
with SCRIPT LOAD and run with EVALSHA through redis-py's ``register_script`` (which reloads them
after a Redis restart empties its script cache).

Per-request work in every script is O(log n) (ZADD/ZPOPMIN on the stage queue, hash updates);
only the completion of a whole batch touches all of its requests, once.

Script calls issued in one event-loop tick travel as one pipeline (``_ScriptBatcher``), which
halves the client CPU per request lifecycle under load.

Waiting without polling: scripts PUBLISH ``<stage> LF <count>`` when a stage queue gains ``count``
requests, and the batch key when a result lands. One subscriber connection per store object fans
these out to local waiters: at most ``count`` lease long-polls per work message (no thundering
herd), every waiter of a batch per result. Pub/sub is at-most-once, so a waiter also re-checks
after ``wake_poll_s`` at most, and a per-key generation counter closes the race between a
caller's empty ``lease()``/``get_batch()`` and its following wait.

Key layout, TTLs and persistence settings: ``keys.py`` and docs/store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from importlib import resources
from typing import Any, TypeVar

import orjson
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from distrs.config import StoreSettings
from distrs.core.history import (
    FINISHED_SAMPLE,
    SPAN_SAMPLES,
    BatchProfile,
    RequestProfile,
    SpanSample,
    prior_span,
)
from distrs.core.model import BatchInfo, Lease, RequestRecord, Result, Status
from distrs.core.priority import QueuePolicy
from distrs.store import errors
from distrs.store.base import (
    BatchLive,
    CompleteOutcome,
    CompletionItem,
    Event,
    NewRequest,
    Snapshot,
    SubmitOutcome,
)
from distrs.store.keys import EVENTS_MAXLEN, Keys
from distrs.store.redis_client import connect

log = logging.getLogger(__name__)

T = TypeVar("T")

_SCRIPTS = (
    "register_batch",
    "submit",
    "lease",
    "lease_bundle",
    "get_lease",
    "heartbeat",
    "heartbeat_bundle",
    "complete",
    "complete_bundle",
    "release",
    "requeue_expired",
)
# Script error code -> (exception, message template, the request field it is about).
_ERRORS: dict[str, tuple[type[errors.StoreError], str, str]] = {
    "unknown_task": (errors.UnknownBatch, "task {task!r} not found", "task"),
    "unknown_batch": (
        errors.UnknownBatch,
        "batch {batch_id!r} of task {task!r} is not registered (POST /v1/batches first)",
        "batch_id",
    ),
    "batch_conflict": (
        errors.BatchConflict,
        "batch {batch_id!r} of task {task!r} exists with size {size} and reward_type {reward_type!r}",
        "size",
    ),
    "batch_full": (
        errors.BatchFull,
        "batch {batch_id!r} of task {task!r} already has {size} requests (its declared size)",
        "batch_id",
    ),
    "unknown_lease": (errors.UnknownLease, "lease {lease_id!r} is unknown or already finished", "lease_id"),
    "lease_not_yours": (
        errors.LeaseNotYours,
        "lease {lease_id!r} was taken by another credential",
        "lease_id",
    ),
    "lease_expired": (errors.LeaseExpired, "lease {lease_id!r} expired at {deadline:.3f}", "lease_id"),
}
_BATCH_FIELDS = set(BatchInfo.model_fields)
_REQUEST_SCALARS = (
    "tenant",
    "task",
    "batch_id",
    "request_id",
    "reward_type",
    "arrived_at",
    "state",
    "stage",
    "stage_enqueued_at",
    "attempts",
    "seq",
)
# Redis error prefixes that mean "try again later" (out of memory under noeviction, a failover in
# progress, a busy script): answered 503 rather than 500.
_TRANSIENT = {"OOM", "READONLY", "MASTERDOWN", "BUSY", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "LOADING"}
# Leases handed out by this process remembered for get_lease (oldest forgotten first).
_LEASE_CACHE_SIZE = 4096
# The most expired leases one requeue script handles before yielding Redis to other clients.
_REQUEUE_CHUNK = 200


def load_script_source(name: str) -> str:
    """A script's text with the shared library prepended (both ship as package data)."""
    lua = resources.files("distrs.store").joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def _num(x: float) -> str:
    return repr(float(x))


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    it = iter(flat)
    return dict(zip(it, it, strict=True))


class _Waker:
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


class _ScriptBatcher:
    """Send the script calls issued in one event-loop tick as one pipeline (auto-pipelining).

    Under load many coroutines call scripts at once (one per lease or completion); sending them
    in one write and reading the replies in one go saves a round trip, a pool checkout and two
    system calls per call. Redis still runs each script atomically and in order. A script Redis
    does not know (after a restart emptied its cache) is loaded and retried one by one.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._pending: list[tuple[AsyncScript, list[str], list[Any], asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append((script, keys, args, fut))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _settle(fut: asyncio.Future[Any], result: Any) -> None:
        if fut.done():
            return
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    async def _send(self, batch: list[tuple[AsyncScript, list[str], list[Any], asyncio.Future[Any]]]) -> None:
        if len(batch) == 1:
            script, keys, args, fut = batch[0]
            try:
                self._settle(fut, await script(keys=keys, args=args))
            except Exception as exc:
                self._settle(fut, exc)
            return
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for script, keys, args, _ in batch:
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
                results = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            for *_, fut in batch:
                self._settle(fut, exc)
            return
        for (script, keys, args, fut), res in zip(batch, results, strict=True):
            if isinstance(res, NoScriptError):
                try:
                    res = await script(keys=keys, args=args)
                except Exception as exc:
                    res = exc
            self._settle(fut, res)


class RedisStore:
    """QueueStore over ``redis.asyncio`` (hiredis parser). See the module docstring."""

    def __init__(
        self,
        client: aioredis.Redis,
        settings: StoreSettings | None = None,
        *,
        namespace: str = "distrs",
        wake_poll_s: float = 1.0,
        events_maxlen: int = EVENTS_MAXLEN,
        autopipeline: bool = True,
    ) -> None:
        self.settings = settings or StoreSettings.model_validate({})
        self.keys = Keys(namespace)
        # decode_responses=True client; typed loosely because redis-py's stubs cover bytes and str
        self._r: Any = client
        self._wake_poll_s = wake_poll_s
        self._events_maxlen = events_maxlen
        self._policy = QueuePolicy(self.settings.queue_policy).value
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(load_script_source(name)) for name in _SCRIPTS
        }
        self._batcher = _ScriptBatcher(client) if autopipeline else None
        self._work = _Waker()
        self._results = _Waker()
        self._lease_cache: OrderedDict[str, Lease] = OrderedDict()
        self._lease_prefix = uuid.uuid4().hex[:16]
        self._lease_counter = itertools.count(1)
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._closed = False
        self._seen_work: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
            f"distrs_seen_work_{id(self)}", default=None
        )
        self._seen_result: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
            f"distrs_seen_result_{id(self)}", default=None
        )

    @classmethod
    def from_url(cls, url: str, settings: StoreSettings | None = None, **kwargs: Any) -> RedisStore:
        """A store over a new client for ``url`` (``redis://``, ``rediss://`` or ``unix://``)."""
        client = connect(url, settings or StoreSettings.model_validate({}))
        return cls(client, settings, **kwargs)

    # lifecycle -----------------------------------------------------------------------------

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
        await self._r.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self._r.ping())
        except (RedisError, RuntimeError, OSError):
            return False

    async def _listen(self) -> None:
        """Subscribe to the wake channels; reconnect with backoff; wake everyone after a gap."""
        work_ch, result_ch = self.keys.work_channel(), self.keys.result_channel()
        backoff = 0.05
        first = True
        while not self._closed:
            pubsub = self._r.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(work_ch, result_ch)
                if not first:
                    # messages published while we were away are lost: let every waiter re-check
                    self._work.wake_all()
                    self._results.wake_all()
                first = False
                self._subscribed.set()
                backoff = 0.05
                async for msg in pubsub.listen():
                    if msg.get("type") != "message":
                        continue
                    if msg["channel"] == work_ch:
                        stage, _, count = msg["data"].rpartition("\n")
                        self._work.wake(stage, int(count) if count.isdigit() else None)
                    else:
                        self._results.wake(msg["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection loss, Redis restart
                log.debug("wake subscription lost: %s", exc)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(backoff)  # never spin, however the subscription ended
            backoff = min(backoff * 2, 2.0)

    # helpers -------------------------------------------------------------------------------

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one Redis interaction; every failure Redis or redis-py can raise becomes a
        StoreError: script errors by their code, everything else ``Unavailable`` (503).

        ``RuntimeError`` is included because redis-py raises it from a connection whose health
        check or read was interrupted (e.g. a read already pending on a connection a cancelled
        call left behind); it says nothing about the request and must not become a 500.
        """
        try:
            return await fn()
        except ResponseError as exc:
            raise self._translate(exc) from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise errors.Unavailable(f"redis unavailable: {exc}") from exc
        except (RedisError, RuntimeError) as exc:
            log.warning("redis call failed: %r", exc)
            raise errors.Unavailable(f"redis unavailable: {type(exc).__name__}: {exc}") from exc

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        script = self._scripts[name]
        if self._batcher is not None:
            batcher = self._batcher
            return await self._call(lambda: batcher.call(script, keys, args))
        return await self._call(lambda: script(keys=keys, args=args))

    @staticmethod
    def _translate(exc: ResponseError) -> Exception:
        text = str(exc)
        if (
            isinstance(exc, OutOfMemoryError | ReadOnlyError | TryAgainError)
            or text.split(" ", 1)[0] in _TRANSIENT
        ):
            return errors.Unavailable(f"redis cannot serve now: {text}")
        if not text.startswith("DISTRS "):
            # an error reply we do not know (a script error, WRONGTYPE from an operator's key):
            # the store cannot serve this call now; the request itself was not at fault
            log.error("redis error reply: %s", text)
            return errors.Unavailable(f"redis cannot serve now: {text}")
        _, code, raw = text.split(" ", 2)
        return RedisStore._error(code, raw)

    @staticmethod
    def _error(code: str, raw: str) -> errors.StoreError:
        """The StoreError for a script's error code and its JSON details."""
        details = orjson.loads(raw) if raw else {}
        if code not in _ERRORS or not isinstance(details, dict):
            return errors.StoreError(f"{code} {raw}")
        cls, template, field = _ERRORS[code]
        try:
            message = template.format(**details)
        except (KeyError, IndexError, ValueError):
            message = code
        return cls(message, field=field)

    def _batch_from_hash(self, h: dict[str, str]) -> BatchInfo:
        data: dict[str, Any] = {k: v for k, v in h.items() if k in _BATCH_FIELDS}
        return BatchInfo.model_validate(data)

    @staticmethod
    def _request_from_hash(h: dict[str, str]) -> RequestRecord:
        data: dict[str, Any] = {k: h[k] for k in _REQUEST_SCALARS if k in h}
        data["payload"] = orjson.loads(h.get("payload") or "{}")
        data["artifacts"] = orjson.loads(h.get("artifacts") or "{}")
        data["stages"] = orjson.loads(h.get("stages") or "[]")
        if h.get("result"):
            data["result"] = orjson.loads(h["result"])
        return RequestRecord.model_validate(data)

    def _finish_args(self) -> list[Any]:
        s = self.settings
        return [s.result_ttl_s, s.history_batches, self._events_maxlen]

    # batches -------------------------------------------------------------------------------

    async def _prior_span(self, reward_type: str | None, now: float) -> float:
        """The span prior of a task with no history (``core.history.prior_span``) from the recent
        finished batches of all tasks; the script uses it only when the task has none itself."""
        raw = await self._call(lambda: self._r.lrange(self.keys.spans(), 0, SPAN_SAMPLES - 1))
        samples = []
        for item in raw:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                d = orjson.loads(item)
                samples.append(SpanSample(d.get("rt"), float(d["at"]), float(d["span"])))
        return prior_span(samples, reward_type, now, self.settings.default_batch_span_s)

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        k = self.keys
        t, b = batch.task, batch.batch_id
        prior = await self._prior_span(batch.reward_type, now)
        out = await self._run(
            "register_batch",
            [
                k.owner(t),
                k.batch(t, b),
                k.span(t),
                k.events(),
                k.active(),
                k.batch_members(t, b),
                k.batch_results(t, b),
                k.batch_queued(t, b),
                k.batch_profile(t, b),
                k.history(t),
                k.spans(),
            ],
            [
                batch.tenant,
                t,
                b,
                batch.size,
                batch.reward_type or "",
                "" if batch.rollout_started_at is None else _num(batch.rollout_started_at),
                _num(now),
                _num(prior),
                self._events_maxlen,
            ],
        )
        return self._batch_from_hash(_pairs(out[1])), bool(out[0])

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None:
        bkey = self.keys.batch(task, batch_id)
        self._seen_result.set((bkey, self._results.generation(bkey)))  # see wait_batch
        h = await self._call(lambda: self._r.hgetall(self.keys.batch(task, batch_id)))
        return self._batch_from_hash(h) if h else None

    async def batch_extra_delay(self, task: str, batch_id: str) -> float | None:
        """Extra delay d = completion − T of a finished batch (None while it runs)."""
        v = await self._call(lambda: self._r.hget(self.keys.batch(task, batch_id), "extra_delay_s"))
        return None if v is None else float(v)

    # requests ------------------------------------------------------------------------------

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        if not requests:
            return SubmitOutcome()
        k = self.keys
        groups: dict[tuple[str, str, str], list[NewRequest]] = {}
        for r in requests:
            groups.setdefault((r.tenant, r.task, r.batch_id), []).append(r)
        keys = [k.seq(), k.events(), k.stages()]
        args: list[Any] = [_num(now), self._policy, _num(self.settings.default_batch_span_s)]
        args += [self._events_maxlen, k.work_channel(), len(groups)]
        order: list[NewRequest] = []
        for (tenant, task, batch_id), reqs in groups.items():
            keys += [k.owner(task), k.batch(task, batch_id)]
            args += [tenant, task, batch_id, len(reqs)]
            for r in reqs:
                keys += [k.request(task, r.request_id), k.queue(r.first_stage)]
                args += [r.request_id, r.reward_type, r.first_stage, orjson.dumps(r.payload).decode()]
                order.append(r)
        flags = await self._run("submit", keys, args)
        out = SubmitOutcome()
        for r, flag in zip(order, flags, strict=True):
            (out.accepted if int(flag) else out.duplicates).append(r.request_id)
        return out

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None:
        h = await self._call(lambda: self._r.hgetall(self.keys.request(task, request_id)))
        return self._request_from_hash(h) if h else None

    # leases --------------------------------------------------------------------------------

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        k = self.keys
        holder = worker_id if holder is None else holder
        self._seen_work.set((stage, self._work.generation(stage)))
        lease_id = self._new_lease_id()
        out = await self._run(
            "lease",
            [k.queue(stage), k.leases(), k.lease(lease_id)],
            [_num(now), _num(ttl_s), worker_id, lease_id, stage, holder],
        )
        if not out:
            return None
        return self._handed_out(lease_id, out, stage, worker_id, holder, now)

    async def lease_many(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str | None = None
    ) -> list[Lease]:
        keys = self.keys
        holder = worker_id if holder is None else holder
        self._seen_work.set((stage, self._work.generation(stage)))
        ids = [self._new_lease_id() for _ in range(max(0, k))]
        if not ids:
            return []
        rows = await self._run(
            "lease_bundle",
            [keys.queue(stage), keys.leases(), *(keys.lease(i) for i in ids)],
            [_num(now), _num(ttl_s), worker_id, stage, holder, *ids],
        )
        return [
            self._handed_out(lease_id, row, stage, worker_id, holder, now)
            for lease_id, row in zip(ids, rows, strict=False)
        ]

    def _new_lease_id(self) -> str:
        # unique across processes (random per-store prefix) without a urandom call per lease
        return f"{self._lease_prefix}{next(self._lease_counter):x}"

    def _handed_out(
        self, lease_id: str, row: list[Any], stage: str, worker_id: str, holder: str, now: float
    ) -> Lease:
        request_id, task, batch_id, reward_type, payload, artifacts, attempt, deadline = row
        got = Lease(
            lease_id=lease_id,
            request_id=request_id,
            task=task,
            batch_id=batch_id,
            reward_type=reward_type,
            stage=stage,
            worker_id=worker_id,
            holder=holder,
            payload=orjson.loads(payload),
            artifacts=orjson.loads(artifacts or "{}"),
            deadline=float(deadline),
            attempt=int(attempt),
            started_at=now,
        )
        if not got.artifacts:  # never keep (possibly large) artifacts in process memory
            self._cache_lease(got)
        return got

    def _cache_lease(self, lease: Lease) -> None:
        cache = self._lease_cache
        cache[lease.lease_id] = lease.model_copy()
        while len(cache) > _LEASE_CACHE_SIZE:
            cache.popitem(last=False)

    async def get_lease(self, lease_id: str) -> Lease | None:
        """A live lease as it was handed out (None once finished or requeued).

        Leases this object handed out are answered from a small local cache (the proxy reads the
        lease before every completion; this saves that round trip). A lease finished or requeued
        by *another* process may still be answered from the cache; the completion that follows
        is checked by Redis and fails as it must.
        """
        cached = self._lease_cache.get(lease_id)
        if cached is not None:
            return cached.model_copy()
        out = await self._run("get_lease", [self.keys.lease(lease_id)], [])
        if not out:
            return None
        (
            request_id,
            task,
            batch_id,
            stage,
            worker,
            deadline,
            attempt,
            started,
            rtype,
            payload,
            arts,
            holder,
        ) = out
        return Lease(
            lease_id=lease_id,
            request_id=request_id,
            task=task,
            batch_id=batch_id,
            reward_type=rtype,
            stage=stage,
            worker_id=worker,
            holder=holder or "",
            payload=orjson.loads(payload or "{}"),
            artifacts=orjson.loads(arts or "{}"),
            deadline=float(deadline),
            attempt=int(attempt),
            started_at=float(started),
        )

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        seen = self._seen_work.get()
        gen = seen[1] if seen is not None and seen[0] == stage else None
        self._seen_work.set(None)
        await self._work.wait(stage, gen, min(timeout_s, self._wake_poll_s))

    async def heartbeat(self, lease_id: str, holder: str, now: float, ttl_s: float) -> float:
        k = self.keys
        out = await self._run(
            "heartbeat", [k.lease(lease_id), k.leases()], [_num(now), _num(ttl_s), holder, lease_id]
        )
        deadline = float(out)
        cached = self._lease_cache.get(lease_id)
        if cached is not None:
            cached.deadline = deadline
        return deadline

    async def complete(
        self,
        lease_id: str,
        holder: str,
        now: float,
        run_s: float,
        next_stage: str | None,
        artifacts: dict[str, str] | None,
        result: Result | None,
        outcome: str,
    ) -> CompleteOutcome:
        k = self.keys
        lkey = k.lease(lease_id)
        self._lease_cache.pop(lease_id, None)  # finished (or refused: then Redis knows better)
        result_json, status = self._result_args(next_stage, result)
        out = await self._run(
            "complete",
            [
                lkey,
                k.leases(),
                k.queue(next_stage) if next_stage else lkey,
                k.events(),
                k.active(),
                k.stages(),
            ],
            [
                _num(now),
                holder,
                lease_id,
                _num(run_s),
                outcome,
                next_stage or "",
                orjson.dumps(artifacts).decode() if artifacts is not None else "",
                result_json,
                status,
                self._policy,
                *self._finish_args(),
                k.work_channel(),
                k.result_channel(),
            ],
        )
        return CompleteOutcome(request=self._request_from_hash(_pairs(out[1])), batch_completed=bool(out[0]))

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | errors.StoreError]:
        k = self.keys
        if not lease_ids:
            return []
        rows = await self._run(
            "heartbeat_bundle",
            [k.leases(), *(k.lease(i) for i in lease_ids)],
            [_num(now), _num(ttl_s), holder, *lease_ids],
        )
        out: list[float | errors.StoreError] = []
        for lease_id, row in zip(lease_ids, rows, strict=True):
            if row[0] == "ok":
                deadline = float(row[1])
                cached = self._lease_cache.get(lease_id)
                if cached is not None:
                    cached.deadline = deadline
                out.append(deadline)
            else:
                out.append(self._error(row[1], row[2]))
        return out

    async def complete_many(
        self, items: Sequence[CompletionItem], holder: str, now: float
    ) -> list[CompleteOutcome | errors.StoreError]:
        k = self.keys
        if not items:
            return []
        keys = [k.leases(), k.events(), k.active(), k.stages()]
        args: list[Any] = [_num(now), holder, self._policy, *self._finish_args()]
        args += [k.work_channel(), k.result_channel(), len(items)]
        for it in items:
            self._lease_cache.pop(it.lease_id, None)
            lkey = k.lease(it.lease_id)
            keys += [lkey, k.queue(it.next_stage) if it.next_stage else lkey]
            args += [it.lease_id, _num(it.run_s), it.outcome, it.next_stage or ""]
            args.append(orjson.dumps(it.artifacts).decode() if it.artifacts is not None else "")
            args += list(self._result_args(it.next_stage, it.result))
        rows = await self._run("complete_bundle", keys, args)
        out: list[CompleteOutcome | errors.StoreError] = []
        for row in rows:
            if row[0] == "ok":
                out.append(
                    CompleteOutcome(
                        request=self._request_from_hash(_pairs(row[2])), batch_completed=bool(row[1])
                    )
                )
            else:
                out.append(self._error(row[1], row[2]))
        return out

    @staticmethod
    def _result_args(next_stage: str | None, result: Result | None) -> tuple[str, str]:
        """The result JSON (without request_id and stages, which the script splices in) and status."""
        final = result or Result(request_id="", status=Status.INTERNAL_ERROR)
        body = final.model_dump_json(exclude={"stages", "request_id"}) if next_stage is None else ""
        return body, final.status.value

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        k = self.keys
        self._lease_cache.pop(lease_id, None)
        return await self._run(
            "release",
            [k.lease(lease_id), k.leases(), k.stages()],
            [_num(now), holder, lease_id, self._policy, k.work_channel()],
        )

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        k = self.keys
        affected: list[tuple[str, str]] = []
        while True:
            out = await self._run(
                "requeue_expired",
                [k.leases(), k.events(), k.active(), k.stages()],
                [
                    _num(now),
                    max_attempts,
                    _REQUEUE_CHUNK,
                    self._policy,
                    *self._finish_args(),
                    k.work_channel(),
                    k.result_channel(),
                ],
            )
            affected += list(zip(out[1::3], out[3::3], strict=True))
            for lease_id in out[2::3]:
                self._lease_cache.pop(lease_id, None)
            if int(out[0]) < _REQUEUE_CHUNK:
                return affected

    # results, history, events --------------------------------------------------------------

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        bkey = self.keys.batch(task, batch_id)
        self._seen_result.set((bkey, self._results.generation(bkey)))
        h = await self._call(lambda: self._r.hgetall(self.keys.batch_results(task, batch_id)))
        return [Result.model_validate_json(h[f]) for f in sorted(h)]

    async def wait_batch(self, task: str, batch_id: str, timeout_s: float) -> None:
        bkey = self.keys.batch(task, batch_id)
        seen = self._seen_result.get()
        gen = seen[1] if seen is not None and seen[0] == bkey else None
        self._seen_result.set(None)
        await self._results.wait(bkey, gen, min(timeout_s, self._wake_poll_s))

    async def history(self, task: str) -> list[BatchProfile]:
        raw = await self._call(lambda: self._r.lrange(self.keys.history(task), 0, -1))
        out = []
        for item in raw:
            d = orjson.loads(item)
            reqs = tuple(
                RequestProfile(
                    r=float(q["r"]),
                    s={k: float(v) for k, v in (q["s"] or {}).items()},
                    status=q.get("status", "ok"),
                )
                for q in d["requests"]
            )
            out.append(
                BatchProfile(
                    task=d["task"],
                    batch_id=d["batch_id"],
                    anchor=float(d["anchor"]),
                    requests=reqs,
                    reward_type=d.get("reward_type"),
                )
            )
        return out

    async def events(self, after: str, timeout_s: float, count: int = 100) -> list[Event]:
        key = self.keys.events()
        start = after or "0"
        if timeout_s > 0:
            block_ms = max(1, int(timeout_s * 1000))
            resp = await self._call(lambda: self._r.xread({key: start}, count=count, block=block_ms))
        else:
            resp = await self._call(lambda: self._r.xread({key: start}, count=count))
        out: list[Event] = []
        for _stream, entries in resp or []:
            for eid, f in entries:
                out.append(
                    Event(
                        id=eid,
                        type=f.get("type", ""),
                        ts=float(f.get("ts", 0.0)),
                        task=f.get("task", ""),
                        batch_id=f.get("batch_id", ""),
                        data=orjson.loads(f["data"]) if f.get("data") else {},
                    )
                )
        return out

    # planner -------------------------------------------------------------------------------

    async def snapshot(self, now: float, finished_types: Collection[str] = ()) -> Snapshot:
        k = self.keys

        async def gather() -> Snapshot:
            async with self._r.pipeline(transaction=False) as p:
                p.zrange(k.active(), 0, -1)
                p.smembers(k.stages())
                p.zrange(k.leases(), 0, -1)
                active, stages, leases = await p.execute()
            stage_list = sorted(stages)
            async with self._r.pipeline(transaction=False) as p:
                for bkey in active:
                    p.hgetall(bkey)
                for st in stage_list:
                    p.zcard(k.queue(st))
                for lkey in leases:
                    p.hmget(lkey, "stage", "started_at", "task", "batch_id")
                res = await p.execute()
            batch_hashes = res[: len(active)]
            depths = res[len(active) : len(active) + len(stage_list)]
            lease_rows = res[len(active) + len(stage_list) :]
            async with self._r.pipeline(transaction=False) as p:
                for h in batch_hashes:
                    if h.get("k_queued"):
                        p.zrange(h["k_queued"], 0, -1, withscores=True)
                    else:
                        p.echo("")
                    if h.get("k_profile") and h.get("reward_type") in finished_types:
                        # a random sample of finished requests' profiles
                        p.hrandfield(h["k_profile"], FINISHED_SAMPLE, withvalues=True)
                    else:
                        p.echo("")
                rows = await p.execute()
            lives: dict[tuple[str, str], BatchLive] = {}
            for h, q, fin in zip(batch_hashes, rows[0::2], rows[1::2], strict=True):
                if not h:
                    continue
                live = BatchLive(batch=self._batch_from_hash(h))
                for member, ts in q or []:
                    stage = member.split("\n", 1)[0]
                    live.queued[stage] = live.queued.get(stage, 0) + 1
                    live.queued_since.setdefault(stage, []).append(float(ts))
                values = fin[1::2] if isinstance(fin, list) else []
                live.finished = [
                    {k: float(v) for k, v in (orjson.loads(x).get("s") or {}).items()} for x in values
                ]
                lives[(live.batch.task, live.batch.batch_id)] = live
            running: dict[str, int] = {}
            for stage, started, task, batch_id in lease_rows:
                if stage is None:
                    continue
                running[stage] = running.get(stage, 0) + 1
                live_b = lives.get((task, batch_id))
                if live_b is not None:
                    live_b.running_elapsed.setdefault(stage, []).append(now - float(started))
            return Snapshot(
                now=now,
                batches=list(lives.values()),
                queue_depth=dict(zip(stage_list, (int(d) for d in depths), strict=True)),
                running=running,
            )

        return await self._call(gather)

    # operations ----------------------------------------------------------------------------

    async def flush_namespace(self) -> int:
        """Delete every key of this namespace (tests and ``distrs`` ops tooling only)."""
        n = 0
        for pattern in self.keys.all_patterns():
            async for key in self._r.scan_iter(match=pattern, count=1000):
                n += int(await self._r.delete(key))
        return n
