"""Cluster mode: the per-stage ready index, which task queues a lease reads.

A lease must find the earliest head across the task queues of its stage (cluster.py). Reading
the head of every task ever registered made its cost grow with tasks that have long finished;
the ready index ``{ns}:ready:S`` (zset task -> generation) names only the tasks whose stage-S
queue may hold work, and the queue stays the authority:

* **mark** (``mark_ready.lua``): after every script that puts work in a task's queue (a
  submission, a completion that moves a request on, a release, a requeue) the store marks the
  task with a fresh generation from one counter. The mark comes *after* the script, so a task
  whose mark is older than its newest work cannot exist once the mark lands.
* **prune** (``prune_ready.lua``): a lease that reads an empty head of a marked task unmarks it,
  but only if its generation is still the one the lease read *before* it read the queue. Work
  that lands after that read is followed by a newer mark, so the unmark is refused or the mark
  comes back: a task with queued work is never left unmarked. The generations only grow, so a
  task unmarked and marked again never shows an old generation.
* **repair**: a mark that never lands (the proxy dies between the script and the mark, or the
  index's primary fails over before its replica had the mark) would hide that queue from
  leases. The expiry sweep checks every registered task's stage queues (``EXISTS``) every
  ``REPAIR_S`` and marks those with work whose mark is missing.

Each process keeps a copy of each stage's index for ``REGISTRY_TTL_S`` and reads it
again at once when a lease finds nothing; it adds its own marks to the copy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from distrs.store import errors
from distrs.store.keys import ClusterKeys
from distrs.store.redis.scripts import (
    MARK_READY,
    PRUNE_READY,
    MarkKeys,
    NoArgs,
    NoKeys,
    ReadyMark,
    ReadyUnmark,
)
from distrs.store.redis.topology.standalone import Topology

log = logging.getLogger(__name__)

# How often (store-clock seconds) the expiry sweep re-marks queues with work that lost their mark.
REPAIR_S = 5.0
# How long a process trusts its copy of a ready index (and of the task registry, cluster.py).
REGISTRY_TTL_S = 0.25


class ReadyCopy:
    """This process's copy of one stage's ready index: task -> generation."""

    def __init__(self) -> None:
        self.tasks: dict[str, int] = {}
        self.read_at = float("-inf")

    def stale(self, ttl_s: float) -> bool:
        return time.monotonic() - self.read_at > ttl_s

    def replace(self, tasks: dict[str, int]) -> None:
        self.tasks = tasks
        self.read_at = time.monotonic()


class ReadyIndex:
    """Marks, prunes, reads and repairs of the ready index (module docstring), through the
    cluster topology's calls (``topology``), its keys and its registry of tasks (``known_tasks``)."""

    def __init__(
        self, topology: Topology, keys: ClusterKeys, known_tasks: Callable[[], Awaitable[list[str]]]
    ) -> None:
        self.topology = topology
        self.keys = keys
        self.known_tasks = known_tasks
        self.copies: dict[str, ReadyCopy] = {}  # stage -> this process's copy
        self._repaired_at = float("-inf")

    async def tasks(self, stage: str, fresh: bool = False) -> dict[str, int]:
        """Tasks marked ready in ``stage`` -> the generation read (this process's copy, read
        again when stale or ``fresh``)."""
        topo = self.topology
        copy = self.copies.setdefault(stage, ReadyCopy())
        if fresh or copy.stale(REGISTRY_TTL_S):
            rows = await topo.call(lambda: topo.client.zrange(self.keys.ready(stage), 0, -1, withscores=True))
            copy.replace({str(t): int(g) for t, g in rows})
        return dict(copy.tasks)

    async def mark(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Mark each (stage, task): its queue may hold work. After the script that queued it.

        A failed mark is logged, not raised: the transition before it stands, and answering 503
        would have the caller retry what already happened; the repair pass restores the mark."""
        todo = sorted(set(pairs))
        if not todo:
            return
        k = self.keys
        try:
            gens = await self.topology.run(
                MARK_READY, MarkKeys(k.ready_gen()), NoArgs(), [ReadyMark(k.ready(s), t) for s, t in todo]
            )
        except errors.Unavailable as exc:
            log.warning("ready marks lost (%s), the repair pass restores them: %s", len(todo), exc.message)
            return
        for (stage, task), gen in zip(todo, gens, strict=True):
            self.copies.setdefault(stage, ReadyCopy()).tasks[task] = int(gen)

    async def prune(self, stage: str, read: dict[str, int]) -> None:
        """Unmark the tasks a lease found empty, each unless marked again since its generation
        ``read[task]`` was read. A failure only leaves them to the next lease."""
        copy = self.copies.get(stage)
        if copy is not None:
            for task, gen in read.items():
                if copy.tasks.get(task) == gen:
                    del copy.tasks[task]
        ready = self.keys.ready(stage)
        rows = [ReadyUnmark(ready, task, gen) for task, gen in sorted(read.items())]
        try:
            await self.topology.run(PRUNE_READY, NoKeys(), NoArgs(), rows)
        except errors.Unavailable as exc:
            log.debug("ready index not pruned: %s", exc.message)

    async def repair(self, now: float) -> None:
        """Every ``REPAIR_S``: mark every registered task's stage queue that has work and no mark."""
        if now - self._repaired_at < REPAIR_S:
            return
        self._repaired_at = now
        topo, k = self.topology, self.keys
        tasks = await self.known_tasks()
        slots = sorted({k.slot_of(t) for t in tasks})

        async def stages_of() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                for s in slots:
                    p.smembers(k.stages(s))
                return list(await p.execute())

        per_slot: dict[int, Any] = dict(zip(slots, await topo.call(stages_of), strict=True)) if slots else {}
        queues = [(st, t) for t in tasks for st in sorted(per_slot.get(k.slot_of(t), ()))]
        if not queues:
            return
        stages = sorted({st for st, _ in queues})

        async def read() -> list[Any]:
            async with topo.client.pipeline(transaction=False) as p:
                for st in stages:
                    p.zrange(k.ready(st), 0, -1)
                for st, t in queues:
                    p.exists(k.queue(st, t))
                return list(await p.execute())

        out = await topo.call(read)
        marked = {(st, str(t)) for st, rows in zip(stages, out, strict=False) for t in rows}
        missing = [q for q, n in zip(queues, out[len(stages) :], strict=True) if n and q not in marked]
        if missing:
            log.warning("ready index: %s task queues with work had lost their mark", len(missing))
            await self.mark(missing)
