"""The production QueueStore: Redis, with every state change in one atomic Lua script.

Why Lua: a lease must pop the head of a queue *and* record who holds it; a completion must record
the stage outcome, move the request on along its route or store its result, count the batch and,
for the last request, fold the batch into the task history and emit an event. Each of those is
one script (``lua/*.lua``, sharing ``lua/lib.lua``; their keys and arguments named in
``scripts.py``), so a crash of the proxy between two steps cannot leave half of a transition
behind, and several proxy processes may share one Redis. Per-request work in every script is
O(log n); only the completion of a whole batch touches all of its requests, once.

``RedisStore`` is composed as the memory store is (``store/composed.py``), of four parts over one
``Topology`` (``topology.py``: standalone, sentinel or cluster, chosen at construction; the modes
differ only there):

* ``batches.py`` registration and submission, ``leases.py`` leases, heartbeats, completion,
  release and the expiry sweep, ``results.py`` results, history, events and the planner's
  snapshot, ``usage.py`` per-tenant usage for quotas;
* shared by them: ``wake.py`` (pub/sub wake-ups of long-polls), ``records.py`` (record hashes
  and error replies), ``scripts.py`` (the scripts' declarations).

Key layout, TTLs and persistence settings: ``keys.py`` and docs/store.md.
"""

from __future__ import annotations

from typing import Any

from distrs.config import StoreSettings
from distrs.store.composed import ComposedStore
from distrs.store.keys import EVENTS_MAXLEN
from distrs.store.redis.batches import RedisBatches
from distrs.store.redis.leases import RedisLeases
from distrs.store.redis.results import RedisResults
from distrs.store.redis.topology import Topology, open_topology
from distrs.store.redis.usage import RedisUsage
from distrs.store.redis.wake import Wakeups


class RedisStore(ComposedStore):
    """QueueStore over ``redis.asyncio`` (hiredis parser). See the package docstring."""

    def __init__(self, topology: Topology, *, wake_poll_s: float = 1.0) -> None:
        self.topology = topology
        self.keys = topology.keys
        self.settings = topology.settings
        self.wake = Wakeups(topology, wake_poll_s)
        super().__init__(
            RedisBatches(topology, self.wake),
            RedisLeases(topology, self.wake),
            RedisResults(topology, self.wake),
            RedisUsage(topology),
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        settings: StoreSettings | None = None,
        *,
        namespace: str = "distrs",
        wake_poll_s: float = 1.0,
        events_maxlen: int = EVENTS_MAXLEN,
    ) -> RedisStore:
        """A store over a new client for ``url`` in the mode ``settings`` name (``open_topology``)."""
        s = settings or StoreSettings.model_validate({})
        return cls(open_topology(url, s, namespace, events_maxlen), wake_poll_s=wake_poll_s)

    async def start(self) -> None:
        await self.topology.start()
        await self.wake.start()

    async def close(self) -> None:
        await self.wake.close()
        await self.topology.close()

    async def ping(self) -> bool:
        return await self.topology.ping()

    async def flush_namespace(self) -> int:
        """Delete every key of this namespace (tests and ``distrs`` ops tooling only)."""
        client: Any = self.topology.client
        n = 0
        for pattern in self.keys.all_patterns():
            async for key in client.scan_iter(match=pattern, count=1000):
                n += int(await client.delete(key))
        return n


__all__ = ["RedisStore"]
