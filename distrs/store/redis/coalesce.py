"""Auto-pipelining: the script calls issued in one event-loop tick travel as one pipeline.

Under load many coroutines call scripts at once (one per lease or completion); sending them in
one write and reading the replies in one go saves a round trip, a pool checkout and two system
calls per call, and halves the client CPU per request lifecycle. Redis still runs each script
atomically and in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from distrs.store.redis.replicas import ReplicaWait
from distrs.store.redis.script_connection import ScriptConnection


class ScriptCoalescer:
    """Send the script calls issued in one event-loop tick as one pipeline (module docstring).

    A script Redis does not know (after a restart emptied its cache) is sent again with EVAL, which also caches
    it.

    With ``connection`` (standalone mode, script_connection.py) the calls travel on the store's
    own pipelined connection instead of redis-py's pipelines.

    With ``wait`` (sentinel mode, replicas.py), a pipeline that carries an acknowledged
    transition ends with ``WAIT``, on the same connection, so that none of its callers is answered
    before a replica has it.
    """

    def __init__(
        self, client: Any, wait: ReplicaWait | None = None, connection: ScriptConnection | None = None
    ) -> None:
        self._client = client
        self._wait = wait
        self._connection = connection
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
        calls, self._pending = self._pending, []
        task = asyncio.create_task(self._send(calls))
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

    def _wait_command(self, calls: list[_Call]) -> tuple[str, int, int] | None:
        if self._wait is None or not any(c.acked for c in calls):
            return None
        return self._wait.command(asyncio.get_running_loop().time())

    async def _send(self, calls: list[_Call]) -> None:
        wait = self._wait_command(calls)
        if len(calls) == 1 and wait is None and self._connection is None:
            c = calls[0]
            try:
                self._settle(c.fut, await c.script(keys=c.keys, args=c.args))
            except Exception as exc:
                self._settle(c.fut, exc)
            return
        for command in ("EVALSHA", "EVAL"):
            try:
                results = await self._execute(command, calls, wait)
            except Exception as exc:
                for c in calls:
                    self._settle(c.fut, exc)
                return
            if wait is not None and self._wait is not None:
                self._wait.answered(results.pop(), asyncio.get_running_loop().time())
            missing: list[_Call] = []
            for c, res in zip(calls, results, strict=True):
                if isinstance(res, NoScriptError) and command == "EVALSHA":
                    missing.append(c)
                else:
                    self._settle(c.fut, res)
            if not missing:
                return
            calls, wait = missing, self._wait_command(missing)

    async def _execute(
        self, command: str, calls: list[_Call], wait: tuple[str, int, int] | None
    ) -> list[Any]:
        """The calls (and the WAIT) in one round trip: replies in order, errors as values."""
        commands = [
            (
                command,
                c.script.sha if command == "EVALSHA" else c.script.script,
                len(c.keys),
                *c.keys,
                *c.args,
            )
            for c in calls
        ]
        if self._connection is not None and wait is None:
            return await self._connection.execute(commands)
        async with self._client.pipeline(transaction=False) as pipe:
            for command_args in commands:
                pipe.execute_command(*command_args)
            if wait is not None:
                pipe.execute_command(*wait)
            return list(await pipe.execute(raise_on_error=False))


@dataclass
class _Call:
    """One script call waiting to be sent."""

    script: AsyncScript
    keys: list[str]
    args: list[Any]
    fut: asyncio.Future[Any]
    acked: bool
