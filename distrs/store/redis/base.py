"""The Redis store's connection, modes and shared plumbing: the client, the wake-up subscriber,
the translation of every Redis failure into a StoreError, and the record parsers the operation
modules (``batches.py``, ``leases.py``, ``results.py``) share.

Why Lua: a lease must pop the head of a queue *and* record who holds it; a completion must record
the stage outcome, move the request on or store its result, count the batch and, for the last
request, fold the batch into the task history and emit an event. Each of those is one script
(``lua/*.lua``, sharing ``lua/lib.lua``, loaded by ``scripts.py``), so a crash of the proxy
between two steps cannot leave half of a transition behind, and several proxy processes may share
one Redis.

Per-request work in every script is O(log n) (ZADD/ZPOPMIN on the stage queue, hash updates);
only the completion of a whole batch touches all of its requests, once.

Waiting without polling: scripts PUBLISH ``<stage> LF <count>`` when a stage queue gains ``count``
requests, and the batch key when a result lands. One subscriber connection per store object fans
these out to local waiters: at most ``count`` lease long-polls per work message (no thundering
herd), every waiter of a batch per result. Pub/sub is at-most-once, so a waiter also re-checks
after ``wake_poll_s`` at most, and a per-key generation counter closes the race between a
caller's empty ``lease()``/``get_batch()`` and its following wait.

Modes: standalone (one primary), cluster (``cluster.py``, ``ready.py``) and sentinel, which is
standalone on the primary the Sentinels name (``store/redis_sentinel.py``) with acknowledged
transitions waiting for a replica (``replicas.py``).

Key layout, TTLs and persistence settings: ``keys.py`` and docs/store.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from distrs.config import StoreSettings
from distrs.core.history import SPAN_SAMPLES
from distrs.core.model import BatchInfo, Lease, RequestRecord
from distrs.core.priority import QueuePolicy
from distrs.store import errors
from distrs.store.keys import EVENTS_MAXLEN, Keys, slot_tags
from distrs.store.redis.channel import ScriptChannel
from distrs.store.redis.cluster import ReadyCopy, TaskRegistry
from distrs.store.redis.replicas import ReplicaWait
from distrs.store.redis.scripts import SCRIPTS, ScriptBatcher, load_script_source
from distrs.store.redis.wake import Waker
from distrs.store.redis_client import connect, connect_cluster
from distrs.store.redis_sentinel import connect_sentinel

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound="RedisBase")

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
# progress, a busy script, a slot moving): answered 503 rather than 500. redis-py's cluster client
# retries MOVED, ASK, TRYAGAIN and CLUSTERDOWN itself first (redis_client.connect_cluster).
_TRANSIENT = {
    "OOM", "READONLY", "MASTERDOWN", "BUSY", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MOVED", "ASK",
}  # fmt: skip


# Cluster mode: the least time between two reads of the slot map after failures.
TOPOLOGY_REFRESH_S = 0.25
# Cluster mode: how long acknowledged writes to a primary that was short of replicas skip WAIT.
SHORT_OF_REPLICAS_S = 5.0
# Cluster mode: tries of an acknowledged transition (script + WAIT) while its slot moves, about
# 3 s in all with the backoff; then the call answers 503.
SLOT_MOVING_ROUNDS = 10


# The suffix of the batch key the scripts publish when the batch completes (lua/lib.lua
# complete_batch): waiters for the whole batch wait on that key alone (wait_batch).
COMPLETED = "\ncompleted"


def completed_key(bkey: str) -> str:
    """The wake-up key of ``bkey``'s completion."""
    return bkey + COMPLETED


def num(x: float) -> str:
    return repr(float(x))


def pairs(flat: Sequence[Any]) -> dict[str, str]:
    it = iter(flat)
    return dict(zip(it, it, strict=True))


class RedisBase:
    """Client, wake-ups and error translation shared by the operation mixins (module docstring)."""

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        settings: StoreSettings | None = None,
        *,
        namespace: str = "distrs",
        wake_poll_s: float = 1.0,
        events_maxlen: int = EVENTS_MAXLEN,
        autopipeline: bool = True,
    ) -> None:
        self.settings = settings or StoreSettings.model_validate({})
        # cluster mode: keys grouped per task and slot (keys.py), scripts hand back what belongs
        # to other slots, leases merge the heads of the task queues (leases.py)
        self.cluster = self.settings.redis_mode == "cluster"
        # sentinel mode: the standalone layout and scripts on the primary the Sentinels name
        # (redis_sentinel.py); acknowledged transitions wait for a replica (replicas.py)
        self.sentinel = self.settings.redis_mode == "sentinel"
        self.keys = Keys(namespace, cluster=self.cluster)
        # decode_responses=True client; typed loosely because redis-py's stubs cover bytes and str
        self._r: Any = client
        self._wake_poll_s = wake_poll_s
        self._events_maxlen = events_maxlen
        self._policy = QueuePolicy(self.settings.queue_policy).value
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(load_script_source(name, self.cluster)) for name in SCRIPTS
        }
        wait = (
            ReplicaWait(self.settings.redis_wait_replicas, self.settings.redis_wait_timeout_ms)
            if self.sentinel
            else None
        )
        # standalone: script calls on a pipelined connection of their own (channel.py)
        self._channel = (
            ScriptChannel(client.connection_pool)
            if autopipeline and not (self.cluster or self.sentinel) and hasattr(client, "connection_pool")
            else None
        )
        # sentinel mode always batches: the WAIT of acknowledged transitions rides in the batch
        self._batcher = ScriptBatcher(client, wait, self._channel) if autopipeline or wait else None
        self._work = Waker()
        self._results = Waker()
        self._lease_cache: OrderedDict[str, Lease] = OrderedDict()
        self._topology_read_at = float("-inf")
        self._short_of_replicas: dict[str, float] = {}  # cluster: primary -> skip WAIT until
        self._tasks = TaskRegistry()  # cluster mode: the registered tasks (reaper, snapshot)
        self._ready_copies: dict[str, ReadyCopy] = {}  # cluster: stage -> ready index (ready.py)
        self._repaired_at = float("-inf")  # cluster: last repair of the ready index
        self._lease_tasks: OrderedDict[str, str] = OrderedDict()  # cluster: lease id -> task
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
    def from_url(cls: type[S], url: str, settings: StoreSettings | None = None, **kwargs: Any) -> S:
        """A store over a new client for ``url`` (``redis://``, ``rediss://`` or ``unix://``; in
        cluster mode any seed node; in sentinel mode ``redis+sentinel://``, distrs/sentinel_url.py)."""
        s = settings or StoreSettings.model_validate({})
        client: aioredis.Redis | RedisCluster
        if s.redis_mode == "cluster":
            client = connect_cluster(url, s)
        elif s.redis_mode == "sentinel":
            client = connect_sentinel(url, s)
        else:
            client = connect(url, s)
        return cls(client, settings, **kwargs)

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._closed = False
        if self._channel is not None:
            self._channel.open()
        if self.cluster:  # the slot tags, built once per process off the event loop
            await asyncio.get_running_loop().run_in_executor(None, slot_tags, self.keys.ns)
            # read the topology now; a cluster that is down yet is read again on first use
            with contextlib.suppress(Exception):
                await self._r.initialize()
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
        if self._channel is not None:
            await self._channel.close()
        await self._r.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self._r.ping())
        except (RedisError, RedisClusterException, RuntimeError, OSError):
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
                    else:  # a batch key (a result landed), or one with COMPLETED (it completed)
                        self._results.wake(msg["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection loss, Redis restart, a failover
                log.debug("wake subscription lost: %s", exc)
                if self.cluster:  # the node may be gone: read the topology again
                    with contextlib.suppress(Exception):
                        await self._r.nodes_manager.initialize()
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
            err = self._translate(exc)
            if self.cluster and isinstance(err, errors.Unavailable):
                await self._refresh_topology()
            raise err from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if self.cluster:
                await self._refresh_topology()
            raise errors.Unavailable(f"redis unavailable: {exc}") from exc
        except (RedisError, RedisClusterException, RuntimeError) as exc:
            log.warning("redis call failed: %r", exc)
            if self.cluster:
                await self._refresh_topology()
            raise errors.Unavailable(f"redis unavailable: {type(exc).__name__}: {exc}") from exc

    async def _refresh_topology(self) -> None:
        """Cluster mode, after a failure: read the slot map again (at most every
        ``TOPOLOGY_REFRESH_S``). redis-py does so for single commands; pipelines (the script
        batcher, the lease's read of the heads) would otherwise keep sending a failed primary's
        slots to it after its replica took over."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._topology_read_at < TOPOLOGY_REFRESH_S:
            return
        self._topology_read_at = loop.time()
        with contextlib.suppress(Exception):  # still failing over: the next failure tries again
            await self._r.nodes_manager.initialize()

    async def _run(
        self, name: str, keys: list[str], args: list[Any], seq: int = 0, bound: str = "", acked: bool = False
    ) -> Any:
        """Run a script. Cluster mode passes ``seq`` (the arrival-sequence base of a submit) and
        ``bound`` (a lease's "score LF seq" limit) in front of ``args`` and appends the events
        and span samples the script hands back (scripts.py) before returning its result; a
        transition the caller is told succeeded (``acked``) waits for its replicas (cluster:
        ``_replicated``; sentinel: the WAIT the script batcher sends after it, replicas.py)."""
        script = self._scripts[name]
        if self.cluster:
            args = [seq, bound, self.keys.fence(keys[0]), *args]
        if self.cluster and acked and self.settings.redis_wait_replicas > 0:
            out = await self._call(lambda: self._replicated(script, keys, args))
        elif self._batcher is not None:
            batcher = self._batcher
            out = await self._call(lambda: batcher.call(script, keys, args, acked))
        else:
            out = await self._call(lambda: script(keys=keys, args=args))
        if not self.cluster:
            return out
        result, events, spans = out
        if events or spans:
            try:
                await self._call(lambda: self._append_global(events, spans))
            except errors.Unavailable as exc:
                # the transition itself stands: answering 503 would have the caller retry what
                # already happened; the planner misses a hint and re-plans at its interval
                log.warning("planner events lost (%s): %s", len(events), exc.message)
        return result

    async def _replicated(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """The script, then ``WAIT replicas timeout`` on the same connection of the same primary
        (one pipeline): WAIT counts the replicas that have this connection's writes so far. A
        primary that dies after the reply cannot take the transition with it: its replica has it.
        When fewer replicas answer in time (one is down or far behind) the transition stands and
        a warning says it is only as durable as the primary's AOF."""
        want, timeout_ms = self.settings.redis_wait_replicas, self.settings.redis_wait_timeout_ms
        node = self._r.get_node_from_key(keys[0])
        now = asyncio.get_running_loop().time()
        if self._short_of_replicas.get(node.name, 0.0) > now:  # see below: do not wait in vain
            return await script(keys=keys, args=args)
        out: Any = None
        acked: Any = None
        for attempt in range(SLOT_MOVING_ROUNDS):
            if attempt:
                # the slot is moving (the script's fence refused, scripts.py) or has just moved:
                # nothing was written; script and WAIT go again, together, to the slot's primary
                if isinstance(out, MovedError):
                    with contextlib.suppress(Exception):
                        await self._r.nodes_manager.initialize()
                await asyncio.sleep(min(0.05 * 1.5**attempt, 0.5))
                node = self._r.get_node_from_key(keys[0])
            out, acked = await self._script_then_wait(node, script, keys, args, want, timeout_ms)
            if not isinstance(out, TryAgainError | AskError | MovedError):
                break
        if isinstance(out, BaseException):
            raise out
        if isinstance(acked, int) and acked < want:
            # a primary without its replica (it failed, or this primary was promoted when its own
            # primary died): every acknowledged write would wait the full timeout; for a while
            # they do not wait at all, as durable as the primary's AOF, until a replica is back
            self._short_of_replicas[node.name] = now + SHORT_OF_REPLICAS_S
            log.warning(
                "only %s of %s replicas of %s acknowledged a write within %s ms; not waiting for "
                "them for %s s",
                acked, want, node.name, timeout_ms, SHORT_OF_REPLICAS_S,
            )  # fmt: skip
        return out

    async def _script_then_wait(
        self, node: Any, script: AsyncScript, keys: list[str], args: list[Any], want: int, timeout_ms: int
    ) -> tuple[Any, Any]:
        """One pipeline to ``node``: the script, then WAIT on the same connection. Redirections
        are not followed here (``_replicated`` retries both): a script redirected alone would be
        followed by a WAIT on another connection, one that counts nothing of it."""
        out: Any = None
        acked: Any = None
        for command in ("EVALSHA", "EVAL"):  # EVAL (which also caches it) when the node lacks it
            code = script.sha if command == "EVALSHA" else script.script
            async with self._r.pipeline(transaction=False) as p:
                p.execute_command(command, code, len(keys), *keys, *args)
                p.execute_command("WAIT", want, timeout_ms, target_nodes=node)
                out, acked = await p.execute(raise_on_error=False, allow_redirections=False)
            if not isinstance(out, NoScriptError):
                break
        return out, acked

    async def _known_tasks(self, fresh: bool = False) -> list[str]:
        """Cluster mode: the registered tasks (this process's copy, read again when stale)."""
        if fresh or self._tasks.stale():
            got = await self._call(lambda: self._r.zrange(self.keys.tasks(), 0, -1))
            self._tasks.replace(got)
        return sorted(self._tasks.tasks)

    async def _append_global(self, events: list[list[str]], spans: list[str]) -> None:
        """Cluster mode: the events and span samples a script produced, into their global keys."""
        async with self._r.pipeline(transaction=False) as p:
            for typ, ts, task, batch_id, data in events:
                fields = {"type": typ, "ts": ts, "task": task, "batch_id": batch_id, "data": data}
                p.xadd(self.keys.events(), fields, maxlen=self._events_maxlen, approximate=True)
            for sample in spans:
                p.lpush(self.keys.spans(), sample)
            if spans:
                p.ltrim(self.keys.spans(), 0, SPAN_SAMPLES - 1)
            await p.execute()

    @staticmethod
    def _translate(exc: ResponseError) -> Exception:
        text = str(exc)
        if (
            isinstance(exc, OutOfMemoryError | ReadOnlyError | TryAgainError | ClusterDownError | AskError)
            or text.split(" ", 1)[0] in _TRANSIENT
        ):
            return errors.Unavailable(f"redis cannot serve now: {text}")
        if not text.startswith("DISTRS "):
            # an error reply we do not know (a script error, WRONGTYPE from an operator's key):
            # the store cannot serve this call now; the request itself was not at fault
            log.error("redis error reply: %s", text)
            return errors.Unavailable(f"redis cannot serve now: {text}")
        _, code, raw = text.split(" ", 2)
        return RedisBase._error(code, raw)

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
