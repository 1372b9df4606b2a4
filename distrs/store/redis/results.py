"""Results, history, events and the planner's snapshot, read from Redis."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from distrs.core.history import FINISHED_SAMPLE, BatchProfile, RequestProfile
from distrs.core.model import Result
from distrs.store.base import BatchLive, Event, Snapshot
from distrs.store.redis.records import batch_from_hash
from distrs.store.redis.topology import Topology
from distrs.store.redis.wake import Wakeups, completed_key


class RedisResults:
    """``ResultPart`` (store/composed.py) over a ``Topology``."""

    def __init__(self, topology: Topology, wake: Wakeups) -> None:
        self.topology = topology
        self.wake = wake

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        topo = self.topology
        self.wake.saw_result(topo.keys.batch(task, batch_id))  # see wait_batch
        h = await topo.call(lambda: topo.client.hgetall(topo.keys.batch_results(task, batch_id)))
        return [Result.model_validate_json(h[f]) for f in sorted(h)]

    async def wait_batch(self, task: str, batch_id: str, timeout_s: float, until_complete: bool) -> None:
        bkey = self.topology.keys.batch(task, batch_id)
        await self.wake.wait_result(completed_key(bkey) if until_complete else bkey, timeout_s)

    async def history(self, task: str) -> list[BatchProfile]:
        topo = self.topology
        raw = await topo.call(lambda: topo.client.lrange(topo.keys.history(task), 0, -1))
        out = []
        for item in raw:
            d = orjson.loads(item)
            reqs = tuple(
                RequestProfile(
                    r=float(q["r"]),
                    s={k: float(v) for k, v in (q["s"] or {}).items()},
                    status=q.get("status", "ok"),
                )
                for q in d["requests"]
            )
            out.append(
                BatchProfile(
                    task=d["task"],
                    batch_id=d["batch_id"],
                    anchor=float(d["anchor"]),
                    requests=reqs,
                    reward_type=d.get("reward_type"),
                )
            )
        return out

    async def events(self, after: str, timeout_s: float, count: int) -> list[Event]:
        topo = self.topology
        key = topo.keys.events()
        start = after or "0"
        if timeout_s > 0:
            block_ms = max(1, int(timeout_s * 1000))
            resp = await topo.call(lambda: topo.client.xread({key: start}, count=count, block=block_ms))
        else:
            resp = await topo.call(lambda: topo.client.xread({key: start}, count=count))
        out: list[Event] = []
        for _stream, entries in resp or []:
            for eid, f in entries:
                out.append(
                    Event(
                        id=eid,
                        type=f.get("type", ""),
                        ts=float(f.get("ts", 0.0)),
                        task=f.get("task", ""),
                        batch_id=f.get("batch_id", ""),
                        data=orjson.loads(f["data"]) if f.get("data") else {},
                    )
                )
        return out

    # planner -------------------------------------------------------------------------------

    async def snapshot(self, now: float, finished_types: Collection[str]) -> Snapshot:
        topo = self.topology
        k = topo.keys
        slots = await topo.slots(fresh=True)

        async def gather() -> Snapshot:
            # every slot with lease indexes and active batches (one standalone), and every queue
            # of a stage in them (one per task and stage in a cluster), summed per stage
            async with topo.client.pipeline(transaction=False) as p:
                for slot in slots:
                    p.zrange(k.active(slot), 0, -1)
                    p.smembers(k.stages(slot))
                    p.zrange(k.leases(slot), 0, -1)
                per_slot = await p.execute()
            active = [b for rows in per_slot[0::3] for b in rows]
            stages_of = dict(zip(slots, per_slot[1::3], strict=True))
            leases = [lk for rows in per_slot[2::3] for lk in rows]
            stage_list = sorted(set().union(*stages_of.values()))
            # (stage, queue key) whose ZCARD counts towards that stage's depth
            queues = [(st, q) for s in slots for st in sorted(stages_of[s]) for q in topo.stage_queues(st, s)]
            async with topo.client.pipeline(transaction=False) as p:
                for bkey in active:
                    p.hgetall(bkey)
                for _, qkey in queues:
                    p.zcard(qkey)
                for lkey in leases:
                    p.hmget(lkey, "stage", "started_at", "task", "batch_id")
                res = await p.execute()
            batch_hashes = res[: len(active)]
            depth: dict[str, int] = dict.fromkeys(stage_list, 0)
            for (st, _), n in zip(queues, res[len(active) : len(active) + len(queues)], strict=True):
                depth[st] += int(n)
            lease_rows = res[len(active) + len(queues) :]
            # per batch: its queued set and (for the asked types) a random sample of finished
            # profiles; absent ones read as empty (no placeholder commands: a cluster pipeline
            # refuses keyless ones)
            reads: list[tuple[int, int]] = []
            async with topo.client.pipeline(transaction=False) as p:
                for i, h in enumerate(batch_hashes):
                    if h.get("k_queued"):
                        p.zrange(h["k_queued"], 0, -1, withscores=True)
                        reads.append((i, 0))
                    if h.get("k_profile") and h.get("reward_type") in finished_types:
                        p.hrandfield(h["k_profile"], FINISHED_SAMPLE, withvalues=True)
                        reads.append((i, 1))
                got = await p.execute() if reads else []
            rows: list[Any] = [None] * (2 * len(batch_hashes))
            for (i, j), value in zip(reads, got, strict=True):
                rows[2 * i + j] = value
            lives: dict[tuple[str, str], BatchLive] = {}
            for h, q, fin in zip(batch_hashes, rows[0::2], rows[1::2], strict=True):
                if not h:
                    continue
                live = BatchLive(batch=batch_from_hash(h))
                for member, ts in q or []:
                    stage = member.split("\n", 1)[0]
                    live.queued[stage] = live.queued.get(stage, 0) + 1
                    live.queued_since.setdefault(stage, []).append(float(ts))
                values = fin[1::2] if isinstance(fin, list) else []
                live.finished = [
                    {k: float(v) for k, v in (orjson.loads(x).get("s") or {}).items()} for x in values
                ]
                lives[(live.batch.task, live.batch.batch_id)] = live
            running: dict[str, int] = {}
            for stage, started, task, batch_id in lease_rows:
                if stage is None:
                    continue
                running[stage] = running.get(stage, 0) + 1
                live_b = lives.get((task, batch_id))
                if live_b is not None:
                    live_b.running_elapsed.setdefault(stage, []).append(now - float(started))
            return Snapshot(
                now=now,
                batches=list(lives.values()),
                queue_depth=depth,
                running=running,
            )

        return await topo.call(gather)
