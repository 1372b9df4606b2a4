"""The local actuator with a real worker-host process against a real proxy process.

Scale-down drains: a busy worker finishes its lease (the request completes once) before it stops.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from distrs.actuators.local import LocalActuator
from tests.fixtures.service import ADMIN, WORKER, running_service


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_scale_up_down_and_drain_never_kills_work() -> None:
    with running_service(workers={}) as svc:
        # Lease polls of 1 s: a drained worker may still take the lease its in-flight poll gets.
        act = LocalActuator(proxy_url=svc.url, token=WORKER, env={"DISTRS_WAIT_S": "1"})
        admin = svc.client(ADMIN)
        try:
            await act.set_replicas("compile", 3)
            obs = await act.observe()
            assert (obs["compile"].desired, obs["compile"].ready) == (3, 3) and act.total_processes() == 1

            async def workers_polling(n: int) -> Callable[[], Awaitable[bool]]:
                async def check() -> bool:
                    return bool(admin.get("/v1/stats").json()["workers"].get("compile", 0) >= n)

                return check

            await wait_for(await workers_polling(3))
            c = svc.client()
            c.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": 2})
            body = {
                "requests": [
                    {
                        "task": "t",
                        "batch_id": "b",
                        "request_id": f"r{i}",
                        "reward_type": "synthetic",
                        "payload": {"durations": {"compile": 3.0}},
                    }
                    for i in range(2)
                ]
            }
            assert c.post("/v1/requests", json=body).status_code == 202

            async def both_running() -> bool:
                return bool(admin.get("/v1/stats").json()["running"].get("compile") == 2)

            await wait_for(both_running)
            # The store counts a lease as running when it grants it; the worker thread takes a few
            # ms more to receive it and start the handler, and a worker drained in that window gives
            # the lease back by design (worker/loop.py). Let both start their 3 s runs first.
            await asyncio.sleep(0.5)
            await act.set_replicas("compile", 0)  # two are busy: they must finish first
            assert (await act.observe())["compile"].ready == 0
            r = c.get("/v1/batches/t/b/results", params={"wait_s": 20}).json()
            assert r["complete"] and [x["status"] for x in r["results"]] == ["ok", "ok"]
            assert all(len(x["stages"]) == 1 for x in r["results"])  # each ran once, no requeue
            # nobody serves compile any more: a new request stays queued
            await asyncio.sleep(1.5)  # past the drained workers' last in-flight poll
            c.post("/v1/batches", json={"task": "t", "batch_id": "b2", "size": 1})
            r2 = c.post("/v1/requests", json={**body["requests"][0], "batch_id": "b2", "request_id": "r9"})
            assert r2.json()["accepted"] == 1
            await asyncio.sleep(1.5)
            assert admin.get("/v1/stats").json()["queues"]["compile"] == 1
            await act.set_replicas("compile", 1)  # the same host resumes it
            r = c.get("/v1/batches/t/b2/results", params={"wait_s": 20}).json()
            assert r["complete"] and act.total_processes() == 1
        finally:
            pids = act.pids()
            await act.close(timeout_s=20)
        assert act.total_processes() == 0 and pids
