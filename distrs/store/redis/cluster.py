"""Cluster mode: what the store does differently when its keys are spread over Redis Cluster
slots (``DISTRS_REDIS_MODE=cluster``; key grouping in ``keys.py``).

One stage queue per task instead of one per stage, so a lease must find the earliest work
across tasks itself. It reads the head of its stage's queue of every task marked in the stage's
ready index (ready.py: the tasks that may have work there; ``ZRANGE q 0 0 WITHSCORES``; one
pipeline, which redis-py sends to every shard at once), orders
them by (score, arrival sequence), the order one queue would give, and takes from the first
with the second's head as a *bound*: the script takes only while its queue's head comes before
the bound (``lib.lua before_bound``), then the lease moves on to the next task (a bundle may take
from several). If another process took the head in between, the bound stops the script and the
lease reads the heads again (``LEASE_ROUNDS``; the last round takes without a bound).

So the order is exact up to what changes between the read of the heads and the script, one
round trip: work submitted in that window with an earlier T, or heads taken concurrently (then
the next round re-reads). docs/store.md, "Cluster", states the bound.

Each process keeps a copy of a stage's ready index (and of the task registry ``keys.tasks()``,
which the expiry sweep and the snapshot read) for ``REGISTRY_TTL_S`` and reads it again at once
when a lease finds nothing, so a task marked by another process is never missed by an idle
worker, and at worst ranked late for that long while there is other work.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

# How long a process trusts its copy of the task registry.
REGISTRY_TTL_S = 0.25
# Reads of the heads per lease call before it gives up on the bound (the last round has none).
LEASE_ROUNDS = 3


def order_heads(tasks: Sequence[str], heads: Sequence[Sequence[Any]]) -> list[tuple[float, str, str]]:
    """(score, arrival seq, task) of every non-empty task queue, earliest first.

    ``heads[i]`` is ``ZRANGE WITHSCORES`` of ``tasks[i]``'s queue: ``[(member, score)]`` or
    ``[]``; a member starts with its zero-padded 20-digit arrival sequence (``keys.seq_field``)."""
    out = [(float(h[0][1]), str(h[0][0])[:20], t) for t, h in zip(tasks, heads, strict=True) if h]
    out.sort()
    return out


def bound_of(head: tuple[float, str, str] | None) -> str:
    """The script's bound for the head that is next in line ('' = none): "score LF seq"."""
    return "" if head is None else f"{head[0]!r}\n{head[1]}"


def by_slot(slots: Iterable[int | None]) -> dict[int | None, list[int]]:
    """Positions grouped by slot, in input order (one script per slot)."""
    out: dict[int | None, list[int]] = {}
    for i, s in enumerate(slots):
        out.setdefault(s, []).append(i)
    return out


class TaskRegistry:
    """This process's copy of the cluster task registry (see the module docstring)."""

    def __init__(self) -> None:
        self.tasks: set[str] = set()
        self.read_at = float("-inf")

    def stale(self) -> bool:
        return time.monotonic() - self.read_at > REGISTRY_TTL_S

    def replace(self, tasks: Iterable[str]) -> None:
        self.tasks = set(tasks)
        self.read_at = time.monotonic()

    def add(self, task: str) -> None:
        self.tasks.add(task)


class ReadyCopy:
    """This process's copy of one stage's ready index: task -> generation (ready.py)."""

    def __init__(self) -> None:
        self.tasks: dict[str, int] = {}
        self.read_at = float("-inf")

    def stale(self) -> bool:
        return time.monotonic() - self.read_at > REGISTRY_TTL_S

    def replace(self, tasks: dict[str, int]) -> None:
        self.tasks = tasks
        self.read_at = time.monotonic()
