"""Standalone mode: one primary, every key under ``{ns}``, one queue per stage; and Sentinel
mode, the same on the primary the Sentinels name. The base ``Topology`` is the standalone one;
the other modes override what differs (see the package docstring)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from distrs.config import StoreSettings
from distrs.core.model import Lease
from distrs.core.priority import QueuePolicy
from distrs.store import errors
from distrs.store.base import NewRequest
from distrs.store.keys import EVENTS_MAXLEN, Keys
from distrs.store.redis.coalesce import ScriptCoalescer
from distrs.store.redis.records import translate
from distrs.store.redis.replicas import ReplicaWait
from distrs.store.redis.script_connection import ScriptConnection
from distrs.store.redis.scripts import SCRIPTS, A, K, Script
from distrs.store.usage_deltas import UsageDeltas

T = TypeVar("T")
# (queue key, slot of its task, the lease's bound in cluster mode or '', how many) -> leases
TakeFrom = Callable[[str, int | None, str, int], Awaitable[list[Lease]]]


class Send(NamedTuple):
    """How a script call is sent (``Topology.run``)."""

    acked: bool
    seq: int
    bound: str
    usage: UsageDeltas | None


_PLAIN, _ACKED = Send(False, 0, "", None), Send(True, 0, "", None)


class Topology:
    """Standalone: one primary (module docstring); the base of the other modes."""

    def __init__(
        self, client: Any, settings: StoreSettings, keys: Keys, events_maxlen: int = EVENTS_MAXLEN
    ) -> None:
        # decode_responses=True client; typed loosely because redis-py's stubs cover bytes and str
        self.client: Any = client
        self.settings = settings
        self.keys = keys
        self.events_maxlen = events_maxlen
        self.policy = QueuePolicy(settings.queue_policy).value
        self._scripts: dict[str, AsyncScript] = {
            s.name: client.register_script(self.source(s)) for s in SCRIPTS
        }
        self._connection: ScriptConnection | None = None
        self._coalescer = self._make_coalescer()

    def source(self, script: Script[Any, Any]) -> str:
        """A script's text as this mode runs it."""
        head, body = script.source("standalone")
        return head + body

    def _make_coalescer(self) -> ScriptCoalescer:
        if hasattr(self.client, "connection_pool"):
            self._connection = ScriptConnection(self.client.connection_pool)
        return ScriptCoalescer(self.client, None, self._connection)

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._connection is not None:
            self._connection.open()

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
        await self.client.aclose()

    async def ping(self) -> bool:
        try:
            return bool(await self.client.ping())
        except (RedisError, RedisClusterException, RuntimeError, OSError):
            return False

    async def connection_lost(self) -> None:
        """The wake-up subscription lost its connection (``wake.py``)."""

    # calls ---------------------------------------------------------------------------------

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one Redis interaction; every failure Redis or redis-py can raise becomes a
        StoreError: script errors by their code, everything else ``Unavailable`` (503).

        ``RuntimeError`` is included because redis-py raises it from a connection whose health
        check or read was interrupted (e.g. a read already pending on a connection a cancelled
        call left behind); it says nothing about the request and must not become a 500."""
        try:
            return await fn()
        except ResponseError as exc:
            err = translate(exc)
            if isinstance(err, errors.Unavailable):
                await self._failed()
            raise err from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            await self._failed()
            raise errors.Unavailable(f"redis unavailable: {exc}") from exc
        except (RedisError, RedisClusterException, RuntimeError) as exc:
            await self._failed()
            raise errors.Unavailable(f"redis unavailable: {type(exc).__name__}: {exc}") from exc

    async def _failed(self) -> None:
        """After a call failed for a reason of Redis' (not a script's refusal)."""

    def run(
        self,
        script: Script[K, A],
        keys: K,
        args: A,
        *rows: Sequence[tuple[Any, ...]],
        shared: tuple[Any, ...] = (),
        acked: bool = False,
        seq: int = 0,
        bound: str = "",
        usage: UsageDeltas | None = None,
    ) -> Awaitable[Any]:
        """Run ``script`` with its named keys, arguments and lists (``scripts.py``). ``acked``: the
        caller is told the transition happened, so it waits for the replicas where the mode has
        them. Cluster mode also takes ``seq`` (a submission's first arrival sequence) and
        ``bound`` (a lease's limit), and adds the usage counts a script handed back to ``usage``
        (elsewhere the scripts count it themselves). Returns an awaitable of the script's answer:
        no coroutine of its own on this, the hottest path."""
        flat_keys, flat_args = script.call(keys, args, *rows, shared=shared)
        how = (
            (_ACKED if acked else _PLAIN)
            if not (seq or bound or usage is not None)
            else Send(acked, seq, bound, usage)
        )
        return self._send(self._scripts[script.name], flat_keys, flat_args, how)

    def _send(self, code: AsyncScript, keys: list[str], args: list[Any], how: Send) -> Awaitable[Any]:
        coalescer = self._coalescer
        return self.call(lambda: coalescer.call(code, keys, args, how.acked))

    # what depends on where keys live ---------------------------------------------------------

    async def task_registered(self, task: str, now: float) -> None:
        """Before a batch of ``task`` is registered."""

    async def arrival_base(self, n: int) -> int:
        """The arrival sequence before a submission's ``n`` requests (0: the script takes it)."""
        return 0

    def script_groups(self, requests: Sequence[NewRequest]) -> list[list[int]]:
        """The positions of a submission's requests, grouped into one script call each."""
        return [list(range(len(requests)))]

    async def work_queued(self, queued: Iterable[tuple[str, str]]) -> None:
        """After a transition that queued work: the (stage, task) pairs it queued."""

    def uncounted(self) -> UsageDeltas | None:
        """Where a transition's scripts put the usage counts they leave to the store's usage
        step; None: they count them themselves (every key shares one slot)."""
        return None

    def take(self, stage: str, k: int, take_from: TakeFrom) -> Awaitable[list[Lease]]:
        """Up to ``k`` leases of ``stage`` in queue order, each queue's taken by ``take_from``."""
        return take_from(self.keys.queue(stage), None, "", k)

    async def slots(self, fresh: bool = False) -> list[int | None]:
        """The slots holding lease indexes, active batches and stage sets."""
        return [None]

    async def expiring_slots(self, now: float) -> list[int | None]:
        """The slots the expiry sweep must visit at ``now``."""
        return [None]

    async def swept(self, now: float) -> None:
        """After an expiry sweep."""

    def stage_queues(self, stage: str, slot: int | None) -> list[str]:
        """The queues of ``stage`` whose keys live in ``slot``."""
        return [self.keys.queue(stage)]


class SentinelTopology(Topology):
    """Sentinel: standalone on the primary the Sentinels name (module docstring)."""

    def _make_coalescer(self) -> ScriptCoalescer:
        s = self.settings
        return ScriptCoalescer(self.client, ReplicaWait(s.redis_wait_replicas, s.redis_wait_timeout_ms))
