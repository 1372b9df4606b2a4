"""The production QueueStore: Redis, with every state change in one atomic Lua script.

The store is split by concern: ``base.py`` (client, modes, wake-ups, error translation),
``scripts.py`` (Lua loading, auto-pipelining), ``replicas.py`` (sentinel mode's WAIT), ``batches.py`` (registration and submission),
``leases.py`` (lease, heartbeat, completion, release, requeue), ``results.py`` (results,
history, events, the planner's snapshot) and ``usage.py`` (per-tenant usage for quotas, counted
around the others' state changes). ``RedisStore`` is all of them together.
"""

from __future__ import annotations

from distrs.store.redis.base import RedisBase
from distrs.store.redis.batches import BatchOps
from distrs.store.redis.leases import LeaseOps
from distrs.store.redis.results import ResultOps
from distrs.store.redis.scripts import load_script_source
from distrs.store.redis.usage import UsageOps


class RedisStore(UsageOps, BatchOps, LeaseOps, ResultOps, RedisBase):
    """QueueStore over ``redis.asyncio`` (hiredis parser). See the package docstring."""


__all__ = ["RedisStore", "load_script_source"]
