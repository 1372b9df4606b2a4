"""Cluster mode: the topology of a store whose keys are spread over Redis Cluster slots
(``DISTRS_REDIS_MODE=cluster``; key grouping in ``keys.py ClusterKeys``).

**Leases across task queues.** One stage queue per task instead of one per stage, so a lease
must find the earliest work across tasks itself. It reads the head of its stage's queue of every
task marked in the stage's ready index (``ready.py``: the tasks that may have work there;
``ZRANGE q 0 0 WITHSCORES``; one pipeline, which redis-py sends to every shard at once), orders
them by (score, arrival sequence), the order one queue would give, and takes from the first with
the second's head as a *bound*: the script takes only while its queue's head comes before the
bound (``lib.lua before_bound``), then the lease moves on to the next task (a bundle may take
from several). If another process took the head in between, the bound stops the script and the
lease reads the heads again (``LEASE_ROUNDS``; the last round takes without a bound). So the
order is exact up to what changes between the read of the heads and the script, one round trip:
work submitted in that window with an earlier T, or heads taken concurrently (then the next
round re-reads). docs/store.md, "Cluster", states the bound.

**Scripts hand back what belongs to other slots.** No script of a transition touches a global
key (events, span samples, the arrival counter) or a tenant's usage counters: the mode's Lua
(``lua/cluster.lua``) gives the script the caller's arrival-sequence base, lease bound and the
slot's fence, collects what belongs elsewhere, and the script returns ``{result, events,
spans, usage}``; the topology appends the events and spans right after and hands the usage
counts to the store's usage step.

**Slot migrations.** A script follows keys it was not given (the request a queue member names,
the batch keys a request names). While its slot moves between primaries (``redis-cli --cluster
reshard``, ``CLUSTER SETSLOT`` + ``MIGRATE``), such a key may already be on the other node. Redis
7 checks keys a script did not declare only when the script reaches them: on the source node the
command fails mid-script and the writes before it stay (a lease could pop a queue entry and
strand its request); on the target node, reached through ``ASK``, a single-key read of a key not
moved yet answers nil as if it did not exist. A read of two keys catches every case: in a
migrating or importing slot Redis refuses a multi-key command that misses any of its keys. So
every cluster script first reads its first key with the slot's fence (``ClusterKeys.fence``,
never written) and, refused, answers ``TRYAGAIN`` before any write; redis-py's cluster client
retries that, and the store answers 503 with Retry-After if the slot is still moving
(tests/faults/test_cluster_migration.py).

**Replicas.** An acknowledged transition is sent with ``WAIT`` on the same connection of the
slot's primary (``_replicated``), so a primary that dies after the reply cannot take it along.

Each process keeps a copy of the task registry (``ClusterKeys.tasks``, which the expiry sweep and
the snapshot read) and of each stage's ready index for ``REGISTRY_TTL_S``, and reads the index
again at once when a lease finds nothing, so a task marked by another process is never missed by
an idle worker, and at worst ranked late for that long while there is other work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import AskError, MovedError, NoScriptError, TryAgainError

from distrs.core.history import SPAN_SAMPLES
from distrs.core.model import Lease
from distrs.store import errors
from distrs.store.base import NewRequest
from distrs.store.keys import ClusterKeys, slot_tags
from distrs.store.redis.coalesce import ScriptCoalescer
from distrs.store.redis.records import num
from distrs.store.redis.scripts import Script
from distrs.store.redis.topology.ready import REGISTRY_TTL_S, ReadyIndex
from distrs.store.redis.topology.standalone import Send, TakeFrom, Topology
from distrs.store.usage_deltas import UsageDeltas

log = logging.getLogger(__name__)

# Reads of the heads per lease call before it gives up on the bound (the last round has none).
LEASE_ROUNDS = 3
# The least time between two reads of the slot map after failures.
TOPOLOGY_REFRESH_S = 0.25
# How long acknowledged writes to a primary that was short of replicas skip WAIT.
SHORT_OF_REPLICAS_S = 5.0
# Tries of an acknowledged transition (script + WAIT) while its slot moves, about 3 s in all
# with the backoff; then the call answers 503.
SLOT_MOVING_ROUNDS = 10

# The script's own code runs as a function, so that what it produced for other slots (collected
# by lua/cluster.lua) comes back with its result as {result, events, spans, usage}.
_BODY = """local function distrs_body()
%s
end
local distrs_result = distrs_body()
if type(distrs_result) == 'table' and distrs_result.err then
  return distrs_result
end
return {distrs_result, CLUSTER.events, CLUSTER.spans, CLUSTER.usage}
"""


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


def usage_of(rows: Iterable[Sequence[Any]], into: UsageDeltas) -> None:
    """The usage counts a script handed back (``lib.lua`` usage_submitted, usage_flush)."""
    for row in rows:
        if row[0] == "s":
            into.submit(row[1], row[2], int(row[3]))
        else:
            _, tenant, bkey, n, size, expires_at = row
            into.add(tenant, bkey, int(n), int(size), float(expires_at) if expires_at else None)


class TaskRegistry:
    """This process's copy of the cluster task registry (module docstring)."""

    def __init__(self) -> None:
        self.tasks: set[str] = set()
        self.read_at = float("-inf")

    def stale(self) -> bool:
        return time.monotonic() - self.read_at > REGISTRY_TTL_S

    def replace(self, tasks: Iterable[str]) -> None:
        self.tasks = set(tasks)
        self.read_at = time.monotonic()


class ClusterTopology(Topology):
    """Cluster mode (module docstring)."""

    keys: ClusterKeys

    def __init__(self, client: Any, settings: Any, keys: ClusterKeys, events_maxlen: int) -> None:
        super().__init__(client, settings, keys, events_maxlen)
        self.registry = TaskRegistry()
        self.ready = ReadyIndex(self, keys, self.known_tasks)
        self._topology_read_at = float("-inf")
        self._short_of_replicas: dict[str, float] = {}  # primary -> skip WAIT until

    def source(self, script: Script[Any, Any]) -> str:
        head, body = script.source("cluster")
        return head + _BODY % body

    def _make_coalescer(self) -> ScriptCoalescer:
        return ScriptCoalescer(self.client)

    async def start(self) -> None:
        # the slot tags, built once per process off the event loop
        await asyncio.get_running_loop().run_in_executor(None, slot_tags, self.keys.ns)
        # read the topology now; a cluster that is down yet is read again on first use
        with contextlib.suppress(Exception):
            await self.client.initialize()

    async def connection_lost(self) -> None:
        # the node may be gone: read the topology again
        with contextlib.suppress(Exception):
            await self.client.nodes_manager.initialize()

    async def _failed(self) -> None:
        """Read the slot map again (at most every ``TOPOLOGY_REFRESH_S``). redis-py does so for
        single commands; pipelines (the script coalescer, the lease's read of the heads) would
        otherwise keep sending a failed primary's slots to it after its replica took over."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._topology_read_at < TOPOLOGY_REFRESH_S:
            return
        self._topology_read_at = loop.time()
        with contextlib.suppress(Exception):  # still failing over: the next failure tries again
            await self.client.nodes_manager.initialize()

    # scripts -------------------------------------------------------------------------------

    async def _send(self, code: AsyncScript, keys: list[str], args: list[Any], how: Send) -> Any:
        """The script with the arguments ``lua/cluster.lua`` takes in front (module docstring);
        what it hands back for other slots appended to them (events, spans) or added to ``usage``."""
        args = [how.seq, how.bound, self.keys.fence(keys[0]), *args]
        if how.acked and self.settings.redis_wait_replicas > 0:
            out = await self.call(lambda: self._replicated(code, keys, args))
        else:
            coalescer = self._coalescer
            out = await self.call(lambda: coalescer.call(code, keys, args, how.acked))
        result, events, spans, counts = out
        if events or spans:
            try:
                await self.call(lambda: self._append_global(events, spans))
            except errors.Unavailable as exc:
                # the transition itself stands: answering 503 would have the caller retry what
                # already happened; the planner misses a hint and re-plans at its interval
                log.warning("planner events lost (%s): %s", len(events), exc.message)
        if counts and how.usage is not None:
            usage_of(counts, how.usage)
        return result

    async def _append_global(self, events: list[list[str]], spans: list[str]) -> None:
        """The events and span samples a script produced, into their global keys."""
        async with self.client.pipeline(transaction=False) as p:
            for typ, ts, task, batch_id, data in events:
                fields = {"type": typ, "ts": ts, "task": task, "batch_id": batch_id, "data": data}
                p.xadd(self.keys.events(), fields, maxlen=self.events_maxlen, approximate=True)
            for sample in spans:
                p.lpush(self.keys.spans(), sample)
            if spans:
                p.ltrim(self.keys.spans(), 0, SPAN_SAMPLES - 1)
            await p.execute()

    async def _replicated(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """The script, then ``WAIT replicas timeout`` on the same connection of the same primary
        (one pipeline): WAIT counts the replicas that have this connection's writes so far. A
        primary that dies after the reply cannot take the transition with it: its replica has it.
        When fewer replicas answer in time (one is down or far behind) the transition stands and
        a warning says it is only as durable as the primary's AOF."""
        want, timeout_ms = self.settings.redis_wait_replicas, self.settings.redis_wait_timeout_ms
        node = self.client.get_node_from_key(keys[0])
        now = asyncio.get_running_loop().time()
        if self._short_of_replicas.get(node.name, 0.0) > now:  # see below: do not wait in vain
            return await script(keys=keys, args=args)
        out: Any = None
        acked: Any = None
        for attempt in range(SLOT_MOVING_ROUNDS):
            if attempt:
                # the slot is moving (the script's fence refused) or has just moved: nothing was
                # written; script and WAIT go again, together, to the slot's primary
                if isinstance(out, MovedError):
                    with contextlib.suppress(Exception):
                        await self.client.nodes_manager.initialize()
                await asyncio.sleep(min(0.05 * 1.5**attempt, 0.5))
                node = self.client.get_node_from_key(keys[0])
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
            async with self.client.pipeline(transaction=False) as p:
                p.execute_command(command, code, len(keys), *keys, *args)
                p.execute_command("WAIT", want, timeout_ms, target_nodes=node)
                out, acked = await p.execute(raise_on_error=False, allow_redirections=False)
            if not isinstance(out, NoScriptError):
                break
        return out, acked

    # tasks ---------------------------------------------------------------------------------

    async def known_tasks(self, fresh: bool = False) -> list[str]:
        """The registered tasks (this process's copy, read again when stale)."""
        if fresh or self.registry.stale():
            got = await self.call(lambda: self.client.zrange(self.keys.tasks(), 0, -1))
            self.registry.replace(got)
        return sorted(self.registry.tasks)

    async def task_registered(self, task: str, now: float) -> None:
        # into the registry first: a task is visible to leases, the reaper and the snapshot
        # before it can have work (a crash right after leaves only a harmless entry)
        await self.call(lambda: self.client.zadd(self.keys.tasks(), {task: now}, gt=True))
        self.registry.tasks.add(task)

    async def arrival_base(self, n: int) -> int:
        """One INCRBY of the global counter for the whole submission, so queue members keep one
        deployment-wide order across the tasks' scripts."""
        top = int(await self.call(lambda: self.client.incrby(self.keys.seq(), n)))
        return top - n

    def script_groups(self, requests: Sequence[NewRequest]) -> list[list[int]]:
        """One script per task (each task is its own slot), all or nothing per task."""
        by_task: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_task.setdefault(r.task, []).append(i)
        return list(by_task.values())

    def uncounted(self) -> UsageDeltas:
        """The scripts hand their usage counts back (module docstring): collected here."""
        return UsageDeltas()

    async def work_queued(self, queued: Iterable[tuple[str, str]]) -> None:
        await self.ready.mark(queued)

    # leases --------------------------------------------------------------------------------

    def take(self, stage: str, k: int, take_from: TakeFrom) -> Awaitable[list[Lease]]:
        """Up to ``k`` leases in EBF order across the task queues marked ready in ``stage``
        (module docstring)."""
        return self._take(stage, k, take_from)

    async def _take(self, stage: str, k: int, take_from: TakeFrom) -> list[Lease]:
        got: list[Lease] = []
        fresh = False
        for rnd in range(LEASE_ROUNDS):
            ready = await self.ready.tasks(stage, fresh)
            heads, empty = await self._heads(stage, sorted(ready))
            if empty:
                await self.ready.prune(stage, {t: ready[t] for t in empty})
            if not heads:
                if fresh:
                    break
                fresh = True  # another process may have registered a task since our copy
                continue
            last_round = rnd == LEASE_ROUNDS - 1
            for i, (_, _, task) in enumerate(heads):
                bound = "" if last_round else bound_of(heads[i + 1] if i + 1 < len(heads) else None)
                got += await take_from(
                    self.keys.queue(stage, task), self.keys.slot_of(task), bound, k - len(got)
                )
                if len(got) >= k:
                    return got
        return got

    async def _heads(self, stage: str, tasks: list[str]) -> tuple[list[tuple[float, str, str]], list[str]]:
        """The head of ``stage``'s queue of each task, earliest first (one pipeline), and the
        tasks whose queue was empty."""
        if not tasks:
            return [], []

        async def read() -> list[Any]:
            async with self.client.pipeline(transaction=False) as p:
                for t in tasks:
                    p.zrange(self.keys.queue(stage, t), 0, 0, withscores=True)
                return list(await p.execute())

        rows = await self.call(read)
        return order_heads(tasks, rows), [t for t, h in zip(tasks, rows, strict=True) if not h]

    # slots ---------------------------------------------------------------------------------

    async def slots(self, fresh: bool = False) -> list[int | None]:
        """Every slot of a registered task."""
        return [*sorted({self.keys.slot_of(t) for t in await self.known_tasks(fresh)})]

    async def expiring_slots(self, now: float) -> list[int | None]:
        """The slots of the registered tasks with an expired lease (one pipelined read)."""
        k = self.keys
        slots = await self.slots(fresh=True)

        async def expired_heads() -> list[Any]:
            async with self.client.pipeline(transaction=False) as p:
                for s in slots:
                    p.zrangebyscore(k.leases(s), "-inf", f"({num(now)}", start=0, num=1)
                return list(await p.execute())

        heads = await self.call(expired_heads) if slots else []
        return [s for s, h in zip(slots, heads, strict=True) if h]

    async def swept(self, now: float) -> None:
        await self.ready.repair(now)

    def stage_queues(self, stage: str, slot: int | None) -> list[str]:
        k = self.keys
        return [k.queue(stage, t) for t in sorted(self.registry.tasks) if k.slot_of(t) == slot]
