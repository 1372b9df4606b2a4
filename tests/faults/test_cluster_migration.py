"""Redis Cluster under topology changes other than a clean failover, with a real ``distrs proxy``
process in cluster mode over a real 3-primary, 3-replica cluster:

* **slot migration under load**: the slots of the busy tasks move between primaries by hand
  (``CLUSTER SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` a few keys at a time, ``SETSLOT NODE``:
  what ``redis-cli --cluster reshard`` does, slowed down so that scripts meet half-moved slots)
  while trainers submit and workers lease and complete through the proxy. Every script fences
  itself against a moving slot (``distrs/store/redis/scripts.py``): refused, it has written
  nothing and is retried or answered 503.
* **``redis-cli --cluster reshard`` itself under load**: the tool moves the first slots of each
  primary (those of a busy task among them) to the next primary, round after round, while the
  same load runs.
* **a primary cut off from its replica** (the replica frozen with SIGSTOP: loopback has no
  firewall to partition with): acknowledged writes wait ``redis_wait_timeout_ms`` for a replica
  that does not answer, then are acknowledged anyway, with a warning; once the replica is back
  and has caught up, the primary is killed and its replica, promoted, has everything.

Both check the same thing at the end: every acknowledged request has exactly one result, with
the score its worker gave it, and no call was answered 500. Workers here are HTTP loops in the
test (not ``distrs worker``) so that the score of every request is known. They give every 4th
lease back unworked (release): of the transitions, release is the one whose declared keys all
exist while it follows the request's keys, so without the fence a release in a half-moved slot
stopped mid-script and left its request queued with no queue entry (this test found it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from redis.crc import key_slot

from distrs.store.keys import ClusterKeys
from distrs.store.redis.topology.cluster import SHORT_OF_REPLICAS_S
from tests.fixtures.redis_cluster import RedisCluster, command
from tests.fixtures.service import TRAINER_A, WORKER, Service, running_service

pytestmark = pytest.mark.redis

TENANT = "tenant-a"  # the tenant of tests.fixtures.service.TRAINER_A
BATCH = 60  # requests per task
CHUNK = 5  # requests per bulk submission
STAGES = ("compile", "execute")


def score_of(rid: str) -> float:
    return (zlib.crc32(rid.encode()) % 1000) / 1000


def task_slot(task: str) -> int:
    return key_slot(ClusterKeys().task_tag(f"{TENANT}/{task}").encode())


def tasks_per_primary(cluster: RedisCluster) -> dict[int, str]:
    """One task name per primary (port -> task): each shard holds busy keys."""
    out: dict[int, str] = {}
    for i in range(1000):
        out.setdefault(cluster.primary_of(task_slot(f"task-{i}")), f"task-{i}")
        if len(out) == 3:
            break
    return out


class Load:
    """Trainers and workers over HTTP through the proxy, and what they saw."""

    def __init__(self, svc: Service, tasks: list[str], pace_s: float = 0.05) -> None:
        self.svc = svc
        self.tasks = tasks
        self.pace_s = pace_s  # between a trainer's submissions
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.acknowledged: set[str] = set()
        self.completions: Counter[tuple[str, str]] = Counter()
        self.refused: Counter[int] = Counter()
        self.seen: dict[str, list[Any]] = {}
        self.leased = 0
        self.stop = asyncio.Event()

    def note(self, what: str, r: httpx.Response) -> None:
        self.statuses[(what, r.status_code)] += 1
        if r.status_code == 503:
            assert r.headers.get("Retry-After"), f"{what}: 503 without Retry-After"

    async def post(self, c: httpx.AsyncClient, what: str, url: str, body: dict[str, Any]) -> httpx.Response:
        """POST until the answer is not 503 (as the client and the worker do)."""
        while True:
            r = await c.post(url, json=body)
            self.note(what, r)
            if r.status_code != 503:
                return r
            await asyncio.sleep(0.1)

    async def trainer(self, c: httpx.AsyncClient, task: str) -> None:
        r = await self.post(c, "register", "/v1/batches", {"task": task, "batch_id": "b", "size": BATCH})
        assert r.status_code in (200, 201), r.text
        for start in range(0, BATCH, CHUNK):
            ids = [f"{task}-r{i}" for i in range(start, start + CHUNK)]
            body = {
                "requests": [
                    {"task": task, "batch_id": "b", "request_id": rid, "reward_type": "synthetic",
                     "payload": {"durations": {"compile": 0.01, "execute": 0.01}}}
                    for rid in ids
                ]
            }  # fmt: skip
            r = await self.post(c, "submit", "/v1/requests", body)
            assert r.status_code == 202, r.text
            self.acknowledged.update(ids)
            await asyncio.sleep(self.pace_s)

    async def worker(self, c: httpx.AsyncClient, stage: str, n: int) -> None:
        wid = f"{stage}-{n}"
        while not self.stop.is_set():
            r = await c.post("/v1/leases", json={"stage": stage, "worker_id": wid, "wait_s": 0.5})
            self.note("lease", r)
            if r.status_code in (204, 503):
                await asyncio.sleep(0.05 if r.status_code == 503 else 0)
                continue
            assert r.status_code == 200, r.text
            lease = r.json()
            rid = lease["request_id"]
            self.seen.setdefault(rid, []).append((stage, lease["lease_id"], time.time()))
            self.leased += 1
            if self.leased % 4 == 0:  # a draining worker gives every 4th lease back unworked
                r = await self.post(
                    c, "release", f"/v1/leases/{lease['lease_id']}/release", {"worker_id": wid}
                )
                assert r.status_code in (200, 404, 409, 410), r.text
                self.seen[rid].append(("release", r.status_code))
                continue
            body: dict[str, Any] = {"worker_id": wid, "outcome": "next", "run_s": 0.01}
            if stage == "execute":
                body = {"worker_id": wid, "outcome": "final", "run_s": 0.01,
                        "result": {"status": "ok", "score": score_of(rid)}}  # fmt: skip
            r = await self.post(c, "complete", f"/v1/leases/{lease['lease_id']}/complete", body)
            self.seen[rid].append((r.status_code, r.text[:100], time.time()))
            if r.status_code == 200:
                self.completions[(stage, rid)] += 1
            else:  # its lease expired and was requeued meanwhile: another lease does the work
                assert r.status_code in (404, 409, 410), r.text
                self.refused[r.status_code] += 1

    @contextlib.asynccontextmanager
    async def running(self) -> Any:
        trainer_c = httpx.AsyncClient(
            base_url=self.svc.url, timeout=60, headers={"Authorization": f"Bearer {TRAINER_A}"}
        )
        worker_c = httpx.AsyncClient(
            base_url=self.svc.url, timeout=60, headers={"Authorization": f"Bearer {WORKER}"}
        )
        async with trainer_c, worker_c:
            workers = [asyncio.create_task(self.worker(worker_c, s, n)) for s in STAGES for n in range(3)]
            trainers = [asyncio.create_task(self.trainer(trainer_c, t)) for t in self.tasks]
            try:
                yield trainers
                await asyncio.gather(*trainers)
                await self.check(trainer_c)
            finally:
                self.stop.set()
                for t in trainers:
                    t.cancel()
                ended = await asyncio.gather(*workers, *trainers, return_exceptions=True)
            failed = [e for e in ended if isinstance(e, Exception)]
            assert not failed, failed  # a worker's failed assertion ends only its own task

    async def check(self, c: httpx.AsyncClient) -> None:
        """Every acknowledged request finished once, unchanged; never a 5xx other than 503."""
        assert len(self.acknowledged) == len(self.tasks) * BATCH
        for task in self.tasks:
            deadline = time.monotonic() + 120
            while True:
                r = await c.get(f"/v1/batches/{task}/b/results", params={"wait_s": 5})
                self.note("results", r)
                if r.status_code == 200 and r.json()["complete"]:
                    break
                if time.monotonic() > deadline:
                    got = (
                        {x["request_id"] for x in r.json().get("results", [])}
                        if r.status_code == 200
                        else set()
                    )
                    missing = sorted({f"{task}-r{i}" for i in range(BATCH)} - got)
                    states = [(raw_state(self.svc, task, rid), self.seen[rid]) for rid in missing[:5]]
                    errs = [
                        ln
                        for ln in self.svc.full_logs("proxy").get("proxy.log", "").splitlines()
                        if "rror" in ln
                    ]
                    raise AssertionError(
                        f"batch of {task} did not finish: missing {missing}: {states}; {errs[:20]}"
                    )
            results = r.json()["results"]
            ids = [x["request_id"] for x in results]
            assert sorted(ids) == sorted(f"{task}-r{i}" for i in range(BATCH))  # none lost, none twice
            for x in results:
                assert x["status"] == "ok" and x["score"] == pytest.approx(score_of(x["request_id"])), x
                assert [s["name"] for s in x["stages"]] == list(STAGES), x  # each stage recorded once
        bad = {k: v for k, v in self.statuses.items() if k[1] >= 500 and k[1] != 503}
        assert not bad, bad
        # a completion the proxy accepted is never accepted again for the same request and stage
        assert all(v == 1 for v in self.completions.values()), self.completions.most_common(3)


def raw_state(svc: Service, task: str, rid: str) -> dict[str, Any]:
    """The store's keys of one request (failure messages)."""
    from redis.cluster import RedisCluster as SyncCluster

    k = ClusterKeys()
    with SyncCluster.from_url(svc.env["DISTRS_REDIS_URL"], decode_responses=True) as r:
        req = r.hgetall(k.request(f"{TENANT}/{task}", rid))
        lkey = req.get("lease", "")
        lease = r.hgetall(lkey) if lkey else {}
        slot = key_slot(k.task_tag(f"{TENANT}/{task}").encode())
        index = r.zrange(k.leases(slot), 0, -1, withscores=True)
        queue = r.zrange(k.queue(req.get("stage", "compile"), f"{TENANT}/{task}"), 0, -1)
    ports = [
        int(x)
        for x in re.findall(
            r":(\d+)@", command(int(svc.env["DISTRS_REDIS_URL"].rsplit(":", 1)[1]), "CLUSTER", "NODES")
        )
    ]
    counts = {p: command(p, "CLUSTER", "COUNTKEYSINSLOT", str(slot)).strip() for p in ports}
    return {"req": {f: req.get(f) for f in ("state", "stage", "lease", "attempts")}, "lease": lease,
            "index": index, "queue": queue, "now": time.time(), "counts": counts}  # fmt: skip


def node_id(port: int) -> str:
    return command(port, "CLUSTER", "MYID").strip()


def migrate_slot(cluster: RedisCluster, slot: int, dst: int, keys_per_call: int = 3) -> int:
    """Move ``slot`` to primary ``dst`` the way ``redis-cli --cluster reshard`` does, a few keys
    per MIGRATE with a pause in between (so that scripts meet the slot half-moved). Returns the
    number of keys moved."""
    src = cluster.primary_of(slot)
    s, d = redis.Redis(port=src, decode_responses=True), redis.Redis(port=dst, decode_responses=True)
    with s, d:
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(src))
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(dst))
        moved = 0
        # the task's own keys (requests, batches, queues) first, the slot's leases and indexes
        # last: the longest time in which a lease is on one node and its request on the other
        first = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
        first.sort(key=lambda key: ":t:" not in key)
        while keys := first[:keys_per_call] or s.execute_command(
            "CLUSTER", "GETKEYSINSLOT", slot, keys_per_call
        ):
            del first[:keys_per_call]
            s.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(0.02)
        for port in (dst, src, *(p for p in cluster.primaries() if p not in (src, dst))):
            redis.Redis(port=port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(dst))
    return moved


def tryagain_count(cluster: RedisCluster) -> int:
    """TRYAGAIN replies the primaries sent so far (INFO errorstats)."""
    total = 0
    for port in cluster.primaries():
        m = re.search(r"errorstat_TRYAGAIN:count=(\d+)", command(port, "INFO", "errorstats"))
        total += int(m.group(1)) if m else 0
    return total


@contextlib.contextmanager
def cluster_service(cluster: RedisCluster) -> Iterator[Service]:
    env = {"DISTRS_REDIS_MODE": "cluster", "DISTRS_LEASE_TTL_S": "10"}
    with running_service(redis_url=cluster.url, env=env) as svc:
        yield svc


async def test_slot_migration_under_load_loses_doubles_and_changes_nothing(
    fresh_redis_cluster: RedisCluster,
) -> None:
    cluster = fresh_redis_cluster
    tasks = tasks_per_primary(cluster)
    primaries = sorted(tasks)
    loop = asyncio.get_running_loop()
    moved: list[int] = []
    with cluster_service(cluster) as svc:
        load = Load(svc, list(tasks.values()))
        async with load.running() as trainers:
            # the busy tasks' slots go round the primaries until the trainers are done
            i = 0
            while not all(t.done() for t in trainers) or i < 3:
                task = load.tasks[i % len(load.tasks)]
                slot = task_slot(task)
                src = cluster.primary_of(slot)
                dst = primaries[(primaries.index(src) + 1) % len(primaries)]
                moved.append(await loop.run_in_executor(None, migrate_slot, cluster, slot, dst))
                i += 1
        assert sum(moved) > 0
        # the load met slots being moved: scripts and commands were refused with TRYAGAIN
        # (and retried); a run that never overlapped would prove nothing
        assert tryagain_count(cluster) > 0, svc.logs()


RESHARD_SLOTS = 200  # slots each reshard moves: the first ones of the source primary


def tasks_in_first_slots(cluster: RedisCluster) -> dict[int, str]:
    """One task per primary whose slot is among that primary's first RESHARD_SLOTS slots (those a
    reshard from it moves): port -> task."""
    first = {
        port: set(range(ranges[0][0], ranges[0][0] + RESHARD_SLOTS))
        for port, ranges in cluster.primaries().items()
    }
    out: dict[int, str] = {}
    for i in range(100_000):
        slot = task_slot(f"task-{i}")
        port = next((p for p, slots in first.items() if slot in slots), None)
        if port is not None:
            out.setdefault(port, f"task-{i}")
            if len(out) == len(first):
                break
    return out


def wait_until_nodes_agree(port: int, cap_s: float = 90.0) -> None:
    """Poll ``redis-cli --cluster check`` until it passes (a cap, not a timing assertion).

    A reshard tells the primaries a slot's new owner; the replicas learn it by gossip, a few
    pings later on a loaded host. Until then ``redis-cli --cluster reshard`` refuses to start
    ("Nodes don't agree about configuration"), having moved nothing: an operator checks first,
    and so does this test."""
    deadline = time.monotonic() + cap_s
    while True:
        r = subprocess.run(
            ["redis-cli", "--cluster", "check", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if r.returncode == 0:
            return
        problems = [ln for ln in r.stdout.splitlines() if "[ERR]" in ln or "[WARNING]" in ln]
        assert time.monotonic() < deadline, (problems, r.stderr[-2000:])
        time.sleep(0.2)


def reshard(cluster: RedisCluster, src: int, dst: int) -> str:
    """``redis-cli --cluster reshard``: RESHARD_SLOTS slots (the source's first) from ``src`` to
    ``dst``, one key per MIGRATE (``--cluster-pipeline 1``), once the nodes agree on who owns
    what."""
    wait_until_nodes_agree(src)
    r = subprocess.run(
        ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{src}", "--cluster-from", node_id(src),
         "--cluster-to", node_id(dst), "--cluster-slots", str(RESHARD_SLOTS), "--cluster-yes",
         "--cluster-pipeline", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


async def test_redis_cli_reshard_under_load_loses_doubles_and_changes_nothing(
    fresh_redis_cluster: RedisCluster,
) -> None:
    assert shutil.which("redis-cli")
    cluster = fresh_redis_cluster
    tasks = tasks_in_first_slots(cluster)
    loop = asyncio.get_running_loop()
    rounds = 0
    moved_busy = 0  # busy tasks' slots that changed primary while their trainer still submitted
    with cluster_service(cluster) as svc:
        load = Load(svc, list(tasks.values()), pace_s=0.2)
        async with load.running() as trainers:
            while not all(t.done() for t in trainers) or rounds < 2:
                ports = sorted(cluster.primaries())
                for src, dst in zip(ports, [*ports[1:], ports[0]], strict=True):
                    before = {t: cluster.primary_of(task_slot(t)) for t in load.tasks}
                    out = await loop.run_in_executor(None, reshard, cluster, src, dst)
                    assert "Moving slot" in out, out[-2000:]
                    moved_busy += sum(
                        not tr.done() and cluster.primary_of(task_slot(t)) != before[t]
                        for t, tr in zip(load.tasks, trainers, strict=True)
                    )
                rounds += 1
        print(
            f"reshard rounds {rounds}, busy slots moved under load {moved_busy}, TRYAGAIN {tryagain_count(cluster)}"
        )
        assert moved_busy > 0  # a run whose moves all came after the load would prove nothing


async def test_primary_cut_off_from_its_replica_then_killed_loses_nothing(
    failover_redis_cluster: RedisCluster,
) -> None:
    cluster = failover_redis_cluster
    tasks = tasks_per_primary(cluster)
    victim = next(iter(tasks))
    info = command(victim, "INFO", "replication")
    m = re.search(r"slave0:ip=[^,]+,port=(\d+)", info)
    assert m, info
    replica = cluster.node(int(m.group(1)))
    assert replica.proc is not None
    with cluster_service(cluster) as svc:
        load = Load(svc, list(tasks.values()), pace_s=0.5)
        async with load.running():

            def victim_acked() -> int:
                return sum(rid.startswith(f"{tasks[victim]}-r") for rid in load.acknowledged)

            await wait_for(lambda: victim_acked() >= BATCH // 4)
            os.kill(replica.proc.pid, signal.SIGSTOP)  # cut off: the primary's WAIT gets no answer
            try:
                before = victim_acked()
                await wait_for(lambda: victim_acked() >= before + 2 * CHUNK)
            finally:
                os.kill(replica.proc.pid, signal.SIGCONT)
            # acknowledged while the replica was away: the proxy said so, and skips the wait for
            # SHORT_OF_REPLICAS_S; once that is over, every acknowledged write waits again
            assert "replicas of" in "".join(svc.full_logs("proxy").values())
            await asyncio.sleep(SHORT_OF_REPLICAS_S + 0.5)
            # the replica has everything written so far, then the primary dies under load
            offset = primary_offset(victim)
            await wait_for(lambda: replica_offset(victim) >= offset)
            cluster.node(victim).kill()
        assert cluster.primary_of(task_slot(tasks[victim])) == replica.port


def primary_offset(primary: int) -> int:
    m = re.search(r"master_repl_offset:(\d+)", command(primary, "INFO", "replication"))
    assert m
    return int(m.group(1))


def replica_offset(primary: int) -> int:
    """The offset the primary's replica acknowledged (-1 while it is not online)."""
    m = re.search(r"slave0:.*,state=online,offset=(\d+)", command(primary, "INFO", "replication"))
    return int(m.group(1)) if m else -1


async def wait_for(cond: Any, cap_s: float = 60.0) -> None:
    """Poll ``cond()`` (a cap, not a timing assertion)."""
    deadline = time.monotonic() + cap_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)
