"""The local actuator with real worker processes against a real proxy process.

Scale-down sends SIGTERM: a busy worker finishes its lease (the request completes) before it exits.
"""

from __future__ import annotations

import asyncio
import time

from distrs.actuators.local import LocalActuator
from tests.fixtures.service import WORKER, running_service


async def wait_for(pred, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_scale_up_down_and_drain_never_kills_work() -> None:
    with running_service(workers={}) as svc:
        act = LocalActuator(
            proxy_url=svc.url, token=WORKER, extra_args={"execute": ["--reward-types", "synthetic"]}
        )
        try:
            await act.set_replicas("compile", 2)
            obs = await act.observe()
            assert obs["compile"].desired == 2 and obs["compile"].ready == 2
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
                stats = svc.client("admin-token").get("/v1/stats").json()
                return bool(stats["running"].get("compile") == 2)

            await wait_for(both_running)
            await act.set_replicas("compile", 0)  # both are busy: they must finish first
            obs = await act.observe()
            assert obs["compile"].ready == 0
            r = c.get("/v1/batches/t/b/results", params={"wait_s": 20}).json()
            assert r["complete"] and [x["status"] for x in r["results"]] == ["ok", "ok"]
            assert all(len(x["stages"]) == 1 for x in r["results"])  # each ran once, no requeue

            async def all_exited() -> bool:
                return act.total_processes() == 0 or all(
                    p.popen.poll() is not None for ps in act._procs.values() for p in ps
                )

            await wait_for(all_exited)
        finally:
            await act.close(timeout_s=10)
        assert act.total_processes() == 0
