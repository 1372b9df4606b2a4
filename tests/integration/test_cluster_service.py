"""The whole service on Redis Cluster: a real ``distrs proxy`` process in cluster mode (only
``DISTRS_REDIS_URL`` naming a seed node and ``DISTRS_REDIS_MODE=cluster``) and real worker
processes for both stages of a two-stage type, over a real 3-primary, 3-replica cluster.
Batches of two tenants' tasks run through compile and execute and come back complete, and no
shard keeps queued work afterwards (``/v1/stats``; its totals over shards with work queued are
tested in store/test_redis_cluster_store.py)."""

from __future__ import annotations

import pytest

from tests.fixtures.redis_cluster import RedisCluster
from tests.fixtures.service import ADMIN, TRAINER_B, running_service

pytestmark = pytest.mark.redis


def test_two_stage_batches_of_two_tenants_complete_over_a_cluster(redis_cluster: RedisCluster) -> None:
    env = {"DISTRS_REDIS_MODE": "cluster"}
    with running_service(workers={"compile": 1, "execute": 1}, redis_url=redis_cluster.url, env=env) as svc:
        clients = {"a": svc.client(), "b": svc.client(TRAINER_B)}
        for tenant, c in clients.items():
            for task in ("t1", "t2"):
                assert (
                    c.post("/v1/batches", json={"task": task, "batch_id": "b", "size": 3}).status_code == 201
                )
                reqs = [
                    {"task": task, "batch_id": "b", "request_id": f"r{i}", "reward_type": "synthetic",
                     "payload": {"durations": {"compile": 0.01, "execute": 0.01}}}
                    for i in range(3)
                ]  # fmt: skip
                r = c.post("/v1/requests", json={"requests": reqs})
                assert r.status_code == 202 and r.json()["accepted"] == 3, (tenant, r.text)
        for c in clients.values():
            for task in ("t1", "t2"):
                got = c.get(f"/v1/batches/{task}/b/results", params={"wait_s": 30}).json()
                assert got["complete"], got
                assert [x["request_id"] for x in got["results"]] == ["r0", "r1", "r2"]
                assert all([s["name"] for s in x["stages"]] == ["compile", "execute"] for x in got["results"])
        stats = svc.client(ADMIN).get("/v1/stats").json()
        assert stats["queues"].get("compile", 0) == 0 and stats["queues"].get("execute", 0) == 0
