"""A Sentinel-managed primary killed (SIGKILL) under load: the Sentinels promote its replica, the
store follows by itself, trainers see nothing but 2xx and 503 with Retry-After through the gap,
and afterwards no acknowledged request is lost, run into two results, or changed.

Everything is a real process: a primary, its replica and three Sentinels
(tests/fixtures/redis_sentinel.py), ``distrs proxy --redis-mode sentinel`` with only the
``redis+sentinel://`` URL of the Sentinels, and two ``distrs worker`` processes; trainers submit
over HTTP and resubmit whatever was not acknowledged, as the client does. Each request's payload
decides its status (ok or wrong_answer), so a result that landed on the wrong request, or was
recorded twice with different outcomes, shows. Registrations, submissions and completions wait
for the replica (WAIT), which is what makes them survive the promotion.

The test prints the window of 503s the trainers saw after the kill (seconds; a measurement, not
an assertion: it depends on the Sentinels' ``down-after-milliseconds`` and the machine).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections import Counter

import httpx
import pytest

from tests.fixtures.redis_sentinel import DOWN_AFTER_MS, RedisSentinel
from tests.fixtures.service import TRAINER_A, running_service

pytestmark = pytest.mark.redis

TASKS = ("t0", "t1", "t2")
BATCH = 60  # requests per task
CHUNK = 5  # requests per bulk submission


def expected_status(rid: str) -> str:
    return "ok" if zlib.crc32(rid.encode()) % 3 else "wrong_answer"


def payload(rid: str) -> dict[str, object]:
    p: dict[str, object] = {"durations": {"compile": 0.01}}
    if expected_status(rid) == "wrong_answer":
        p.update(fail_stage="compile", status="wrong_answer")
    return p


async def test_a_killed_primary_loses_doubles_and_changes_nothing_through_the_proxy(
    fresh_redis_sentinel: RedisSentinel,
) -> None:
    deployment = fresh_redis_sentinel
    statuses: Counter[int] = Counter()
    unavailable_at: list[float] = []  # monotonic times of 503s
    acknowledged: set[tuple[str, str]] = set()

    def note(r: httpx.Response) -> bool:
        """Count a response; True when it is to be retried (503, which must say when)."""
        statuses[r.status_code] += 1
        if r.status_code == 503:
            assert r.headers.get("Retry-After"), r.text
            unavailable_at.append(time.monotonic())
            return True
        return False

    async def trainer(c: httpx.AsyncClient, task: str) -> None:
        while note(r := await c.post("/v1/batches", json={"task": task, "batch_id": "b", "size": BATCH})):
            await asyncio.sleep(0.1)
        assert r.status_code in (200, 201), r.text
        for start in range(0, BATCH, CHUNK):
            ids = [f"{task}-r{i}" for i in range(start, start + CHUNK)]
            body = {
                "requests": [
                    {"task": task, "batch_id": "b", "request_id": rid, "reward_type": "synthetic",
                     "payload": payload(rid)}
                    for rid in ids
                ]
            }  # fmt: skip
            while note(r := await c.post("/v1/requests", json=body)):
                await asyncio.sleep(0.1)
            assert r.status_code == 202, r.text
            acknowledged.update((task, rid) for rid in ids)
            await asyncio.sleep(0.05)

    async def results(c: httpx.AsyncClient, task: str) -> dict[str, object]:
        deadline = time.monotonic() + 120  # a cap, not a timing assertion
        while True:
            r = await c.get(f"/v1/batches/{task}/b/results", params={"wait_s": 10})
            if not note(r):
                assert r.status_code == 200, r.text
                got: dict[str, object] = r.json()
                if got["complete"]:
                    return got
            assert time.monotonic() < deadline, f"batch {task} did not finish after the failover"
            await asyncio.sleep(0.1)

    # WAIT up to 2 s: the checks are about what an acknowledgement means once the replica has
    # answered (a shortfall on a loaded machine would acknowledge a write on the primary only)
    with running_service(
        workers={"compile": 2},
        redis_url=deployment.url,
        proxy_args=["--redis-mode", "sentinel"],
        env={"DISTRS_REDIS_WAIT_TIMEOUT_MS": "2000"},
    ) as svc:
        async with httpx.AsyncClient(
            base_url=svc.url, headers={"Authorization": f"Bearer {TRAINER_A}"}, timeout=60
        ) as c:
            trainers = [asyncio.create_task(trainer(c, t)) for t in TASKS]
            deadline = time.monotonic() + 60
            while len(acknowledged) < BATCH:  # well under way
                assert time.monotonic() < deadline, svc.logs()
                await asyncio.sleep(0.02)
            old = deployment.kill_primary()
            killed_at = time.monotonic()
            await asyncio.gather(*trainers)
            new = await asyncio.get_running_loop().run_in_executor(None, deployment.wait_failover, old)
            got = {t: await results(c, t) for t in TASKS}
        proxy_log = svc.full_logs("proxy")

    assert new != old
    assert set(statuses) <= {200, 201, 202, 503}, statuses  # never a 500
    assert unavailable_at, "the kill was never seen: nothing was tested"
    assert len(acknowledged) == len(TASKS) * BATCH
    for task, batch in got.items():
        rows = batch["results"]
        assert isinstance(rows, list)
        ids = [row["request_id"] for row in rows]
        assert sorted(ids) == sorted(f"{task}-r{i}" for i in range(BATCH))  # none lost, none twice
        for row in rows:
            assert row["status"] == expected_status(row["request_id"]), row  # none changed
    # the proxy itself never failed: no unhandled exception, no error logged (the lease reaper's
    # sweeps during the gap say in one warning line each that the store was unavailable)
    text = "".join(proxy_log.values())
    assert "Exception in ASGI application" not in text and "Traceback" not in text, text[-4000:]
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert not errors, errors
    gap = [t - killed_at for t in unavailable_at if t >= killed_at]
    print(
        f"\nsentinel failover (down-after {DOWN_AFTER_MS} ms): 503s from {min(gap):.2f} s to "
        f"{max(gap):.2f} s after the kill, {len(gap)} of {sum(statuses.values())} responses"
    )
