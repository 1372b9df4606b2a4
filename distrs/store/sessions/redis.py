"""The SessionStore over Redis (standalone, sentinel's primary, or a cluster).

Why this shape: every transition of one session (a call queued, taken, answered; the session
ended) is one Lua script over that session's keys, which share a hash tag (``keys.py``), so it is
atomic and touches one slot in a cluster. What spans slots (a worker's queue, the shared create
queue, a tenant's quota set, the indexes) is written around those scripts in an order that a
crash between two steps leaves harmless: a call is recorded before its id is queued (a repeated
id in a queue is dropped when taken: only a ``queued`` call can be taken), and ``sweep`` drops
index entries whose session is gone.

Wake-ups: one subscriber connection per store object on ``keys.wake()`` fans messages out to
local waiters (``store/redis/wake.py``); pub/sub is at-most-once, so every wait is also bounded
by ``wake_poll_s``. Failures of Redis become ``Unavailable`` (503), as in the request store.

``sweep`` and ``stats`` read every session (pipelined): O(sessions) per call, meant for a
sweep per second over thousands of sessions, not millions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from redis.exceptions import RedisClusterException, RedisError

from distrs.core.sessions import (
    EndReason,
    OpKind,
    OpState,
    SessionOp,
    SessionRecord,
    SessionState,
    WorkerView,
    ended_answer,
    expiry,
    op_deadline,
)
from distrs.store.errors import Unavailable
from distrs.store.redis.wake import Waker
from distrs.store.sessions.base import (
    Completed,
    OpConflict,
    OpDone,
    SessionEnded,
    SessionNotFound,
    SessionQuotaExceeded,
    SessionStats,
    SweepReport,
)
from distrs.store.sessions.keys import (
    SessionKeys,
    op_fields,
    op_from,
    rec_fields,
    rec_from,
    session_of,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_SUBMIT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'not_found'} end
local known = redis.call('HMGET', KEYS[2], 'body', 'kind')
if known[1] then
  if known[1] ~= ARGV[2] or known[2] ~= ARGV[3] then return {'conflict'} end
  return {'known'}
end
if redis.call('HGET', KEYS[1], 'state') == 'closed' then return {'ended'} end
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'busy', 1)
redis.call('HSET', KEYS[1], 'last_used_at', ARGV[4])
return {'queued', redis.call('HGET', KEYS[1], 'worker_id') or ''}
"""

_TAKE = """
if redis.call('HGET', KEYS[2], 'state') ~= 'queued' then return false end
if ARGV[5] == '1' then
  if redis.call('HGET', KEYS[1], 'state') == 'closed' then return false end
  redis.call('HSET', KEYS[1], 'worker_id', ARGV[1], 'holder', ARGV[2])
end
local run = tonumber(redis.call('HGET', KEYS[2], 'run_s') or '0')
local deadline = string.format('%.6f', tonumber(ARGV[3]) + run + tonumber(ARGV[4]))
redis.call('HSET', KEYS[2], 'state', 'running', 'worker_id', ARGV[1], 'holder', ARGV[2],
  'started_at', ARGV[3], 'deadline', deadline)
return redis.call('HGETALL', KEYS[2])
"""

_COMPLETE = """
local st = redis.call('HMGET', KEYS[2], 'state', 'holder', 'kind')
if st[1] ~= 'running' then return {'unknown_op'} end
if st[2] ~= ARGV[1] then return {'op_not_yours'} end
redis.call('HSET', KEYS[2], 'state', 'done', 'result', ARGV[3], 'error', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[8])
if redis.call('EXISTS', KEYS[1]) == 0 then return {'close'} end
if redis.call('LREM', KEYS[3], 1, ARGV[9]) > 0 then
  if tonumber(redis.call('HINCRBY', KEYS[1], 'busy', -1)) < 0 then redis.call('HSET', KEYS[1], 'busy', 0) end
end
local kind = st[3]
if kind ~= 'close' then redis.call('HSET', KEYS[1], 'last_used_at', ARGV[2]) end
if kind == 'exec' then redis.call('HINCRBY', KEYS[1], 'execs', 1) end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'restarts', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'cpu_total_s', ARGV[6]) end
local state = redis.call('HGET', KEYS[1], 'state')
if kind == 'create' then
  if state == 'closed' then return {'close'} end
  if ARGV[4] ~= '' then return {'create_failed'} end
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', ARGV[2])
end
if ARGV[7] ~= '' and state ~= 'closed' then return {'ended'} end
return {'ok'}
"""

_END = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if state == 'closed' then return {'already'} end
redis.call('HSET', KEYS[1], 'state', 'closed', 'end_reason', ARGV[1], 'ended_at', ARGV[2])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'detail', ARGV[5]) end
local out = {'ended', redis.call('HGET', KEYS[1], 'worker_id') or '', redis.call('HGET', KEYS[1], 'tenant')}
for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local key = ARGV[6] .. id
  local s = redis.call('HGET', key, 'state')
  if s == 'queued' or (ARGV[3] == '1' and s == 'running') then
    redis.call('HSET', key, 'state', 'done', 'error', ARGV[4])
    redis.call('LREM', KEYS[2], 1, id)
    redis.call('HINCRBY', KEYS[1], 'busy', -1)
    out[#out + 1] = id
  end
end
if tonumber(redis.call('HGET', KEYS[1], 'busy')) < 0 then redis.call('HSET', KEYS[1], 'busy', 0) end
return out
"""

_TENANT_ADD = """
if ARGV[2] ~= '' and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return redis.call('ZCARD', KEYS[1])
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return -1
"""
ORPHAN_AGE_S = 60.0  # a tenant's entry without its session this long is a create cut short


class RedisSessionStore:
    def __init__(self, client: Any, *, namespace: str = "distrs", wake_poll_s: float = 0.5) -> None:
        self._r = client
        self.keys = SessionKeys(namespace)
        self._wake_poll_s = wake_poll_s
        self._scripts = {
            name: client.register_script(src)
            for name, src in (
                ("submit", _SUBMIT),
                ("take", _TAKE),
                ("complete", _COMPLETE),
                ("end", _END),
                ("tenant_add", _TENANT_ADD),
            )
        }
        self._ops = Waker()
        self._workers = Waker()
        self._listener: asyncio.Task[None] | None = None
        self._closed = False

    # lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._closed = False
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="distrs-session-wake")

    async def close(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        with contextlib.suppress(Exception):
            await self._r.aclose()

    async def _listen(self) -> None:
        backoff = 0.05
        while not self._closed:
            pubsub = self._r.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.wake())
                self._ops.wake_all()  # whatever was published while away: everyone re-checks
                self._workers.wake_all()
                backoff = 0.05
                async for msg in pubsub.listen():
                    if msg.get("type") != "message":
                        continue
                    kind, _, what = str(msg["data"]).partition(" ")
                    if kind == "o":
                        self._ops.wake(what)
                    elif kind == "w":
                        self._workers.wake(what)
                    else:  # a create: any worker with room may take it
                        self._workers.wake_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("session wake subscription lost: %s", exc)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except (RedisError, RedisClusterException, OSError, RuntimeError) as exc:
            raise Unavailable(f"redis unavailable: {type(exc).__name__}: {exc}") from exc

    async def _publish(self, *messages: str) -> None:
        for m in messages:
            with contextlib.suppress(RedisError, RedisClusterException, OSError):
                await self._r.publish(self.keys.wake(), m)

    # trainer side ---------------------------------------------------------------------------
    async def create(self, rec: SessionRecord, op: SessionOp, now: float, max_open: int | None) -> SessionOp:
        k = self.keys

        async def run() -> SessionOp:
            tenant_key = k.tenant_open(rec.tenant)
            quota = "" if max_open is None else str(max_open)
            got = await self._scripts["tenant_add"](
                keys=[tenant_key], args=[rec.session_id, quota, repr(now)]
            )
            if int(got) >= 0:
                raise SessionQuotaExceeded(
                    f"tenant {rec.tenant!r} has {got} open sessions (its quota is {max_open})",
                    max_open=max_open,
                )
            await self._r.sadd(k.tenants(), rec.tenant)
            await self._r.hset(k.rec(rec.session_id), mapping=rec_fields(rec.model_copy(update={"busy": 1})))
            await self._r.hset(k.op(op.op_id), mapping=op_fields(op, self._run_s(op)))
            await self._r.rpush(k.pending(rec.session_id), op.op_id)
            await self._r.sadd(k.ops(rec.session_id), op.op_id)
            await self._r.sadd(k.all(), rec.session_id)
            await self._r.rpush(k.creates(), op.op_id)
            return op

        out = await self._call(run)
        await self._publish("c")
        return out

    @staticmethod
    def _run_s(op: SessionOp) -> float:
        return op_deadline(op.kind, op.body, 0.0, 0.0)

    async def get(self, session_id: str) -> SessionRecord | None:
        h = await self._call(lambda: self._r.hgetall(self.keys.rec(session_id)))
        return rec_from(h) if h else None

    async def submit(self, op: SessionOp, now: float) -> SessionOp:
        k, sid = self.keys, op.session_id
        fields = op_fields(op, self._run_s(op))
        flat = [x for kv in fields.items() for x in kv]
        args = [op.op_id, fields["body"], op.kind.value, repr(now), *flat]
        keys = [k.rec(sid), k.op(op.op_id), k.pending(sid), k.ops(sid)]
        got = await self._call(lambda: self._scripts["submit"](keys=keys, args=args))
        what = got[0]
        if what == "not_found":
            raise SessionNotFound(f"session {sid!r} not found", session_id=sid)
        if what == "conflict":
            raise OpConflict(f"exec_id {op.op_id!r} was used for another call", field="exec_id")
        if what == "ended":
            rec = await self.get(sid)
            assert rec is not None
            raise SessionEnded(rec)
        if what == "known":
            known = await self.get_op(op.op_id)
            assert known is not None
            return known
        worker = got[1]
        if worker:
            await self._call(lambda: self._r.rpush(k.queue(worker), op.op_id))
            await self._publish(f"w {worker}")
        return op

    async def get_op(self, op_id: str) -> SessionOp | None:
        h = await self._call(lambda: self._r.hgetall(self.keys.op(op_id)))
        return op_from(h) if h else None

    async def wait_op(self, op_id: str, timeout_s: float) -> None:
        gen = self._ops.generation(op_id)
        op = await self.get_op(op_id)
        if op is None or op.done:
            return
        await self._ops.wait(op_id, gen, min(timeout_s, self._wake_poll_s))

    # worker side ----------------------------------------------------------------------------
    async def poll(self, worker: WorkerView, now: float, max_ops: int, grace_s: float) -> list[SessionOp]:
        k, wid = self.keys, worker.worker_id

        async def run() -> list[SessionOp]:
            await self._r.hset(k.workers(), wid, worker.model_dump_json())
            out: list[SessionOp] = []
            ids = await self._r.lpop(k.queue(wid), max_ops) or []
            for op_id in ids:
                got = await self._take(op_id, worker, now, grace_s, create=False)
                if got is not None:
                    out.append(got)
            room = worker.capacity - int(await self._r.scard(k.held(wid)))
            while not worker.draining and room > 0 and len(out) < max_ops:
                op_id = await self._r.lpop(k.creates())
                if op_id is None:
                    break
                got = await self._take(op_id, worker, now, grace_s, create=True)
                if got is None:
                    continue
                sid = got.session_id
                await self._r.sadd(k.held(wid), sid)
                room -= 1
                out.append(got)
                later = [i for i in await self._r.lrange(k.pending(sid), 0, -1) if i != op_id]
                if later:  # calls made while it opened
                    await self._r.rpush(k.queue(wid), *later)
            return out

        return await self._call(run)

    async def _take(
        self, op_id: str, worker: WorkerView, now: float, grace_s: float, *, create: bool
    ) -> SessionOp | None:
        k, sid = self.keys, session_of(op_id)
        args = [worker.worker_id, worker.holder, f"{now:.6f}", repr(grace_s), "1" if create else "0"]
        got = await self._scripts["take"](keys=[k.rec(sid), k.op(op_id)], args=args)
        if not got:
            return None
        return op_from(dict(zip(got[::2], got[1::2], strict=True)))

    async def wait_for_ops(self, worker_id: str, timeout_s: float) -> None:
        gen = self._workers.generation(worker_id)
        queued = await self._call(lambda: self._r.llen(self.keys.queue(worker_id)))
        if queued:
            return
        await self._workers.wait(worker_id, gen, min(timeout_s, self._wake_poll_s))

    async def complete(self, holder: str, items: list[OpDone], now: float) -> list[Completed]:
        return [await self._call(lambda i=item: self._complete_one(holder, i, now)) for item in items]  # type: ignore[misc]

    async def _complete_one(self, holder: str, item: OpDone, now: float) -> Completed:
        k, sid = self.keys, session_of(item.op_id)
        s = item.session
        args = [
            holder,
            f"{now:.6f}",
            "" if item.result is None else orjson.dumps(item.result).decode(),
            "" if item.error is None else orjson.dumps(item.error).decode(),
            _s(s.get("restarts")),
            _s(s.get("cpu_total_s")),
            _s(s.get("ended")),
            str(OP_TTL_S),
            item.op_id,
        ]
        got = await self._scripts["complete"](keys=[k.rec(sid), k.op(item.op_id), k.pending(sid)], args=args)
        await self._publish(f"o {item.op_id}")
        what = got[0]
        if what in ("unknown_op", "op_not_yours"):
            return Completed(op_id=item.op_id, error=what)
        if what == "close":
            return Completed(op_id=item.op_id, close=True)
        if what == "create_failed":
            detail = str((item.error or {}).get("message", ""))[:500]
            await self._end(sid, EndReason.CREATE_FAILED, now, close=False, detail=detail)
        elif what == "ended":
            ended = str(s.get("ended"))
            reason = EndReason(ended) if ended in EndReason._value2member_map_ else EndReason.LOST
            await self._end(sid, reason, now, close=False)
        return Completed(op_id=item.op_id)

    # ending ---------------------------------------------------------------------------------
    async def end(self, session_id: str, reason: EndReason, now: float) -> SessionRecord | None:
        await self._call(lambda: self._end(session_id, reason, now, close=True))
        return await self.get(session_id)

    async def _end(
        self, sid: str, reason: EndReason, now: float, *, close: bool, running: bool = False, detail: str = ""
    ) -> bool:
        """End session ``sid`` (module docstring of ``base.py``); True if this call ended it."""
        k = self.keys
        status, code, message = ended_answer(reason)
        error = orjson.dumps({"status": status, "code": code, "message": message}).decode()
        args = [reason.value, f"{now:.6f}", "1" if running else "0", error, detail, k.op_prefix(sid)]
        got = await self._scripts["end"](keys=[k.rec(sid), k.pending(sid)], args=args)
        if got[0] != "ended":
            return False
        worker, tenant, failed = got[1], got[2], got[3:]
        await self._r.zrem(k.tenant_open(tenant), sid)
        if worker:
            await self._r.srem(k.held(worker), sid)
            if close and await self._r.hexists(k.workers(), worker):
                op = SessionOp(op_id=f"{sid}.close", session_id=sid, kind=OpKind.CLOSE, created_at=now)
                await self._r.hset(k.op(op.op_id), mapping=op_fields(op, 0.0))
                await self._r.sadd(k.ops(sid), op.op_id)
                await self._r.rpush(k.queue(worker), op.op_id)
                await self._publish(f"w {worker}")
        await self._publish(*(f"o {i}" for i in failed))
        return True

    async def sweep(
        self, now: float, worker_ttl_s: float, create_timeout_s: float, closed_ttl_s: float
    ) -> SweepReport:
        return await self._call(lambda: self._sweep(now, worker_ttl_s, create_timeout_s, closed_ttl_s))

    async def _sweep(
        self, now: float, worker_ttl_s: float, create_timeout_s: float, closed_ttl_s: float
    ) -> SweepReport:
        k, report = self.keys, SweepReport()
        for wid, raw in (await self._r.hgetall(k.workers())).items():
            w = WorkerView.model_validate_json(raw)
            if now - w.seen_at <= worker_ttl_s:
                continue
            for sid in await self._r.smembers(k.held(wid)):
                if await self._end(sid, EndReason.LOST, now, close=False, running=True):
                    report.add(EndReason.LOST)
            await self._r.hdel(k.workers(), wid)
            await self._r.delete(k.held(wid), k.queue(wid))
            report.workers_lost.append(wid)
        recs, pending = await self._read_all()
        for sid, rec in recs.items():
            if rec is None:
                await self._r.srem(k.all(), sid)
                continue
            if rec.state is SessionState.CLOSED:
                if rec.ended_at is not None and now - rec.ended_at > closed_ttl_s:
                    await self._forget(sid)
                continue
            reason = expiry(rec, now)
            if reason is not None:
                if await self._end(sid, reason, now, close=True):
                    report.add(reason)
                continue
            for op in pending.get(sid, []):
                if op.state is OpState.RUNNING and op.deadline is not None and now > op.deadline:
                    if await self._end(sid, EndReason.LOST, now, close=True, running=True):
                        report.add(EndReason.LOST)
                    break
                if (
                    op.kind is OpKind.CREATE
                    and op.state is OpState.QUEUED
                    and now - op.created_at > create_timeout_s
                ):
                    if await self._end(sid, EndReason.CREATE_TIMEOUT, now, close=False):
                        report.add(EndReason.CREATE_TIMEOUT)
                    break
        for tenant in await self._r.smembers(k.tenants()):  # a create cut short left its entry
            for sid, since in await self._r.zrange(k.tenant_open(tenant), 0, -1, withscores=True):
                rec = recs.get(sid)
                orphan = sid not in recs and now - float(since) > ORPHAN_AGE_S
                if orphan or (rec is not None and rec.state is SessionState.CLOSED):
                    await self._r.zrem(k.tenant_open(tenant), sid)
        return report

    async def _read_all(self) -> tuple[dict[str, SessionRecord | None], dict[str, list[SessionOp]]]:
        """Every session and its pending calls (pipelined reads)."""
        k = self.keys
        sids = sorted(await self._r.smembers(k.all()))
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            pipe.hgetall(k.rec(sid))
            pipe.lrange(k.pending(sid), 0, -1)
        got = await pipe.execute() if sids else []
        recs: dict[str, SessionRecord | None] = {}
        ids: list[str] = []
        for i, sid in enumerate(sids):
            h, pend = got[2 * i], got[2 * i + 1]
            recs[sid] = rec_from(h) if h else None
            ids += pend
        pending: dict[str, list[SessionOp]] = {}
        if ids:
            pipe = self._r.pipeline(transaction=False)
            for op_id in ids:
                pipe.hgetall(k.op(op_id))
            for h in await pipe.execute():
                if h:
                    op = op_from(h)
                    pending.setdefault(op.session_id, []).append(op)
        return recs, pending

    async def _forget(self, sid: str) -> None:
        k = self.keys
        ops = await self._r.smembers(k.ops(sid))
        for op_id in ops:
            await self._r.delete(k.op(op_id))
        await self._r.delete(k.rec(sid), k.pending(sid), k.ops(sid))
        await self._r.srem(k.all(), sid)

    # views ----------------------------------------------------------------------------------
    async def stats(self, now: float) -> SessionStats:
        async def run() -> SessionStats:
            k = self.keys
            workers = [
                WorkerView.model_validate_json(v) for v in (await self._r.hgetall(k.workers())).values()
            ]
            s = SessionStats(workers=workers, creates_queued=int(await self._r.llen(k.creates())))
            recs, pending = await self._read_all()
            for rec in recs.values():
                if rec is None or rec.state is SessionState.CLOSED:
                    continue
                if rec.state is SessionState.OPENING:
                    s.opening += 1
                else:
                    s.open += 1
                    s.busy_sessions += rec.busy > 0
                if rec.worker_id:
                    s.open_by_worker[rec.worker_id] = s.open_by_worker.get(rec.worker_id, 0) + 1
            for ops in pending.values():
                for op in ops:
                    if op.kind is not OpKind.CREATE:
                        s.ops_queued += op.state is OpState.QUEUED
                        s.ops_running += op.state is OpState.RUNNING
            return s

        return await self._call(run)

    async def tenant_open(self, tenant: str) -> int:
        return int(await self._call(lambda: self._r.zcard(self.keys.tenant_open(tenant))))


OP_TTL_S = 3600  # an answered call is kept this long (a repeated exec_id gets its answer)


def _s(v: object) -> str:
    return "" if v is None else str(v)
