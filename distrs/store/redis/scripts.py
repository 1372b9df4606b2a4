"""Lua script loading and auto-pipelining of script calls.

Each script is ``lua/lib.lua`` + its own file (package data), behind a one-line prelude that
says whether it runs on a cluster (``load_script_source``), registered with redis-py's
``register_script`` (EVALSHA, reloaded after a Redis restart empties its script cache). Script
calls issued in one event-loop tick travel as one pipeline (``ScriptBatcher``), which halves the
client CPU per request lifecycle under load.

Cluster mode, slot migrations: a script follows keys it was not given (the request a queue
member names, the batch keys a request names). While its slot moves between primaries
(``redis-cli --cluster reshard``, ``CLUSTER SETSLOT`` + ``MIGRATE``), such a key may already be
on the other node. Redis 7 checks keys a script did not declare only when the script reaches
them: on the source node the command fails mid-script and the writes before it stay (a lease
could pop a queue entry and strand its request); on the target node, reached through ``ASK``, a
single-key read of a key not moved yet answers nil as if it did not exist (the lease would drop
the entry as a vanished request). Reading one by one the keys a script will touch can therefore
not catch every case; a read of two keys can: in a migrating or importing slot Redis refuses a
multi-key command that misses any of its keys. So every cluster script first reads its first key
with the slot's fence (``Keys.fence``, never written) and, refused, answers ``TRYAGAIN`` before
any write; redis-py's cluster client retries that, and the store answers 503 with Retry-After if
the slot is still moving (tests/faults/test_cluster_migration.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from distrs.store.redis.channel import ScriptChannel
from distrs.store.redis.replicas import ReplicaWait

SCRIPTS = (
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
    "mark_ready",
    "prune_ready",
)


# Standalone: the scripts write the global keys themselves.
_STANDALONE = "local CLUSTER = false\n"
# Cluster: the first three ARGV are the caller's arrival-sequence base (submit), lease bound
# (lease, lease_bundle; '' = none) and the slot's fence key (see the module docstring); events
# and span samples the script produced come back with its result as
# {result, {{type, ts, task, batch_id, data}, ...}, {span JSON, ...}}.
_CLUSTER_HEAD = """local CLUSTER = {seq = table.remove(ARGV, 1), bound = table.remove(ARGV, 1),
  fence = table.remove(ARGV, 1), events = {}, spans = {}}
local distrs_fenced = redis.pcall('EXISTS', KEYS[1], CLUSTER.fence)
if type(distrs_fenced) == 'table' and distrs_fenced.err then
  return redis.error_reply('TRYAGAIN slot of ' .. KEYS[1] .. ' is migrating')
end
"""
_CLUSTER_BODY = """local function distrs_body()
%s
end
local distrs_result = distrs_body()
if type(distrs_result) == 'table' and distrs_result.err then
  return distrs_result
end
return {distrs_result, CLUSTER.events, CLUSTER.spans}
"""


def load_script_source(name: str, cluster: bool = False) -> str:
    """A script's text with the shared library prepended (both ship as package data); in cluster
    mode wrapped so that it hands back what belongs to other slots (see ``_CLUSTER_HEAD``)."""
    lua = resources.files("distrs.store").joinpath("lua")
    lib, body = lua.joinpath("lib.lua").read_text(), lua.joinpath(f"{name}.lua").read_text()
    if cluster:
        return _CLUSTER_HEAD + lib + "\n" + _CLUSTER_BODY % body
    return _STANDALONE + lib + "\n" + body


class ScriptBatcher:
    """Send the script calls issued in one event-loop tick as one pipeline (auto-pipelining).

    Under load many coroutines call scripts at once (one per lease or completion); sending them
    in one write and reading the replies in one go saves a round trip, a pool checkout and two
    system calls per call. Redis still runs each script atomically and in order. A script Redis
    does not know (after a restart emptied its cache) is sent again with EVAL, which also caches
    it.

    With ``channel`` (standalone mode, channel.py) the batches travel on the store's own
    pipelined connection instead of redis-py's pipelines.

    With ``wait`` (sentinel mode, replicas.py), a pipeline that carries an acknowledged
    transition ends with ``WAIT``, on the same connection, so that none of its callers is answered
    before a replica has it.
    """

    def __init__(
        self, client: Any, wait: ReplicaWait | None = None, channel: ScriptChannel | None = None
    ) -> None:
        self._client = client
        self._wait = wait
        self._channel = channel
        self._pending: list[_Call] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, script: AsyncScript, keys: list[str], args: list[Any], acked: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call(script, keys, args, fut, acked))
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

    def _wait_command(self, batch: list[_Call]) -> tuple[str, int, int] | None:
        if self._wait is None or not any(c.acked for c in batch):
            return None
        return self._wait.command(asyncio.get_running_loop().time())

    async def _send(self, batch: list[_Call]) -> None:
        wait = self._wait_command(batch)
        if len(batch) == 1 and wait is None and self._channel is None:
            c = batch[0]
            try:
                self._settle(c.fut, await c.script(keys=c.keys, args=c.args))
            except Exception as exc:
                self._settle(c.fut, exc)
            return
        for command in ("EVALSHA", "EVAL"):
            try:
                results = await self._execute(command, batch, wait)
            except Exception as exc:
                for c in batch:
                    self._settle(c.fut, exc)
                return
            if wait is not None and self._wait is not None:
                self._wait.answered(results.pop(), asyncio.get_running_loop().time())
            missing: list[_Call] = []
            for c, res in zip(batch, results, strict=True):
                if isinstance(res, NoScriptError) and command == "EVALSHA":
                    missing.append(c)
                else:
                    self._settle(c.fut, res)
            if not missing:
                return
            batch, wait = missing, self._wait_command(missing)

    async def _execute(
        self, command: str, batch: list[_Call], wait: tuple[str, int, int] | None
    ) -> list[Any]:
        """The batch's calls (and the WAIT) in one round trip: replies in order, errors as values."""
        calls = [
            (
                command,
                c.script.sha if command == "EVALSHA" else c.script.script,
                len(c.keys),
                *c.keys,
                *c.args,
            )
            for c in batch
        ]
        if self._channel is not None and wait is None:
            return await self._channel.execute(calls)
        async with self._client.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.execute_command(*call)
            if wait is not None:
                pipe.execute_command(*wait)
            return list(await pipe.execute(raise_on_error=False))


@dataclass
class _Call:
    """One script call waiting in the batcher."""

    script: AsyncScript
    keys: list[str]
    args: list[Any]
    fut: asyncio.Future[Any]
    acked: bool
