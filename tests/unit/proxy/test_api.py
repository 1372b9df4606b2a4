"""API v1 through the real FastAPI app (in process): happy paths and every bad input the
service must answer with a 4xx naming the problem, while it keeps serving."""

from __future__ import annotations

from typing import Any

from tests.unit.proxy.conftest import Api


def req(i: int, batch: str = "b1", task: str = "t1", **kw: Any) -> dict[str, Any]:
    body = {
        "task": task,
        "batch_id": batch,
        "request_id": f"r{i}",
        "reward_type": "synthetic",
        "payload": {"durations": {"compile": 1.0, "execute": 1.0}},
    }
    body.update(kw)
    return body


async def register(api: Api, size: int = 3, batch: str = "b1", task: str = "t1") -> None:
    r = await api.trainer.post("/v1/batches", json={"task": task, "batch_id": batch, "size": size})
    assert r.status_code == 201, r.text


async def lease(api: Api, stage: str, worker_id: str = "w1") -> dict[str, Any]:
    r = await api.worker.post("/v1/leases", json={"stage": stage, "worker_id": worker_id})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def error(r: Any) -> dict[str, Any]:
    body: dict[str, Any] = r.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
    return body["error"]


async def test_full_lifecycle_two_stages(api: Api) -> None:
    await register(api, size=2)
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1)]})
    assert r.status_code == 202 and r.json()["accepted"] == 2
    for stage, outcome in (
        ("compile", "next"),
        ("compile", "next"),
        ("execute", "final"),
        ("execute", "final"),
    ):
        ls = await lease(api, stage)
        body: dict[str, Any] = {"worker_id": "w1", "outcome": outcome, "run_s": 1.5}
        if outcome == "final":
            body["result"] = {"status": "ok", "score": 1.0}
        else:
            body["artifacts"] = {"binary": "AAAA"}
        r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/complete", json=body)
        assert r.status_code == 200, r.text
        if stage == "execute":
            assert ls["artifacts"] == {"binary": "AAAA"}
    r = await api.trainer.get("/v1/batches/t1/b1/results")
    body = r.json()
    assert body["complete"] is True and [x["request_id"] for x in body["results"]] == ["r0", "r1"]
    assert [s["name"] for s in body["results"][0]["stages"]] == ["compile", "execute"]
    assert body["extra_delay_s"] is not None
    r = await api.trainer.get("/v1/requests/t1/r1")
    assert r.json()["state"] == "done" and r.json()["result"]["status"] == "ok"


async def test_resubmission_is_a_duplicate_and_never_runs_twice(api: Api) -> None:
    await register(api, size=2)
    assert (await api.trainer.post("/v1/requests", json=req(0))).json()["accepted"] == 1
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1)]})
    assert r.json() | {} == {"accepted": 1, "duplicates": 1, "accepted_ids": ["r1"], "duplicate_ids": ["r0"]}
    leased = {(await lease(api, "compile"))["request_id"] for _ in range(2)}
    assert leased == {"r0", "r1"}
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1", "wait_s": 0})
    assert r.status_code == 204


async def test_request_id_is_idempotent_per_task_not_per_batch(api: Api) -> None:
    await register(api, size=1, batch="b1")
    await register(api, size=2, batch="b2")
    assert (await api.trainer.post("/v1/requests", json=req(0, batch="b1"))).json()["accepted"] == 1
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0, batch="b2"), req(1, batch="b2")]})
    assert r.status_code == 202 and r.json()["duplicate_ids"] == ["r0"] and r.json()["accepted_ids"] == ["r1"]
    leased = [(await lease(api, "compile"))["request_id"] for _ in range(2)]
    assert sorted(leased) == ["r0", "r1"]  # r0 once, from its first batch
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1", "wait_s": 0})
    assert r.status_code == 204
    assert (await api.trainer.get("/v1/requests/t1/r0")).json()["batch_id"] == "b1"


async def test_malformed_json_is_400(api: Api) -> None:
    r = await api.trainer.post(
        "/v1/requests", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and error(r)["code"] == "malformed_json"
    r = await api.trainer.post("/v1/batches", content=b"[1,", headers={"content-type": "application/json"})
    assert r.status_code == 400 and error(r)["code"] == "malformed_json"


async def test_missing_and_extra_fields_name_the_field(api: Api) -> None:
    await register(api)
    body = req(0)
    del body["request_id"]
    r = await api.trainer.post("/v1/requests", json=body)
    assert r.status_code == 422 and "request_id" in error(r)["message"]
    r = await api.trainer.post("/v1/requests", json=req(0, surprise=1))
    assert r.status_code == 422 and "surprise" in error(r)["message"]
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), {**req(1), "payload": "x"}]})
    assert r.status_code == 422 and "requests.1.payload" in error(r)["message"]
    r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b2", "size": 0})
    assert r.status_code == 422 and "size" in error(r)["message"]


async def test_unknown_reward_type_and_stage(api: Api) -> None:
    await register(api)
    r = await api.trainer.post("/v1/requests", json=req(0, reward_type="fortran"))
    assert r.status_code == 422 and "reward_type" in error(r)["message"] and "fortran" in error(r)["message"]
    r = await api.worker.post("/v1/leases", json={"stage": "link", "worker_id": "w1"})
    assert r.status_code == 422 and "stage" in error(r)["message"]


async def test_oversize_payload_body_and_artifacts(api: Api) -> None:
    await register(api)
    r = await api.trainer.post("/v1/requests", json=req(0, payload={"code": "x" * 5000}))
    assert r.status_code == 413 and "payload" in error(r)["message"]
    r = await api.trainer.post("/v1/requests", content=b"{" + b" " * 70_000 + b"}")
    assert r.status_code == 413 and error(r)["code"] == "body_too_large"
    await api.trainer.post("/v1/requests", json=req(0))
    ls = await lease(api, "compile")
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete",
        json={"worker_id": "w1", "outcome": "next", "artifacts": {"bin": "A" * 4000}},
    )
    assert r.status_code == 413 and "artifacts" in error(r)["message"]
    # nothing was lost: the lease is still live and can complete properly
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete",
        json={"worker_id": "w1", "outcome": "next", "artifacts": {"bin": "A"}},
    )
    assert r.status_code == 200


async def test_lease_not_yours_and_expired(api: Api) -> None:
    await register(api)
    await api.trainer.post("/v1/requests", json=req(0))
    ls = await lease(api, "compile", "w1")
    held = await api.store.get_lease(ls["lease_id"])
    # ownership is the token's: another token naming the same worker_id is refused
    r = await api.admin.post(
        f"/v1/leases/{ls['lease_id']}/complete", json={"worker_id": "w1", "outcome": "next"}
    )
    assert r.status_code == 403 and error(r)["code"] == "lease_not_yours"
    assert error(r)["details"]["field"] == "lease_id"
    assert await api.store.get_lease(ls["lease_id"]) == held  # re-read: still held, unchanged
    state = (await api.trainer.get("/v1/requests/t1/r0")).json()
    assert state["state"] == "running" and state["stage"] == "compile" and state.get("result") is None
    api.clock.t += 11  # past the 10 s lease TTL
    r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/heartbeat", json={"worker_id": "w1"})
    assert r.status_code == 409 and error(r)["code"] == "lease_expired"
    assert await api.store.requeue_expired(api.clock.t, 3) == [("r0", "compile")]
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete", json={"worker_id": "w1", "outcome": "next"}
    )
    assert r.status_code == 404 and error(r)["code"] == "unknown_lease"
    again = await lease(api, "compile", "w2")
    assert again["request_id"] == "r0" and again["attempt"] == 2


async def test_release_gives_the_lease_back(api: Api) -> None:
    await register(api)
    await api.trainer.post("/v1/requests", json=req(0))
    ls = await lease(api, "compile", "w1")
    r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/release", json={"worker": "w1"})
    assert r.status_code == 422 and "worker_id" in error(r)["message"]
    held = await api.store.get_lease(ls["lease_id"])
    r = await api.admin.post(f"/v1/leases/{ls['lease_id']}/release", json={"worker_id": "w1"})
    assert r.status_code == 403 and error(r)["code"] == "lease_not_yours"
    assert await api.store.get_lease(ls["lease_id"]) == held  # not released
    r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/release", json={"worker_id": "w1"})
    assert r.status_code == 200 and r.json() == {"lease_id": ls["lease_id"], "released": True}
    assert 'distrs_lease_releases_total{stage="compile"} 1.0' in (await api.anon.get("/metrics")).text
    r = await api.trainer.post(f"/v1/leases/{ls['lease_id']}/release", json={"worker_id": "w1"})
    assert r.status_code == 403  # a trainer token may not
    again = await lease(api, "compile", "w2")
    assert again["request_id"] == "r0" and again["attempt"] == 1


async def test_batch_over_declared_size_rejects_whole_call(api: Api) -> None:
    await register(api, size=2)
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1), req(2)]})
    assert r.status_code == 409 and error(r)["code"] == "batch_full"
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1)]})
    assert r.json()["accepted"] == 2


async def test_unregistered_batch_and_conflicting_registration(api: Api) -> None:
    r = await api.trainer.post("/v1/requests", json=req(0, batch="nope"))
    assert r.status_code == 404 and "POST /v1/batches" in error(r)["message"]
    await register(api, size=3)
    r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 3})
    assert r.status_code == 200  # idempotent re-registration
    r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 4})
    assert r.status_code == 409 and error(r)["code"] == "batch_conflict"


async def test_tenant_isolation(api: Api) -> None:
    await register(api)
    await api.trainer.post("/v1/requests", json=req(0))
    for path in ("/v1/batches/t1/b1/results", "/v1/requests/t1/r0"):
        r = await api.other_tenant.get(path)
        assert r.status_code == 404
    r = await api.other_tenant.post("/v1/requests", json=req(5))
    assert r.status_code == 404  # tenant B has no batch b1 of its own task t1
    # B's task t1 is its own: registering it neither fails nor touches A's t1
    r = await api.other_tenant.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 1})
    assert r.status_code == 201 and r.json()["task"] == "t1" and r.json()["size"] == 1
    r = await api.trainer.get("/v1/batches/t1/b1/results")
    assert r.status_code == 200 and r.json()["size"] == 3 and r.json()["task"] == "t1"
    r = await api.admin.get("/v1/batches/t1/b1/results", params={"tenant": "tenant-a"})
    assert r.status_code == 200 and r.json()["size"] == 3
    assert (await api.admin.get("/v1/batches/t1/b1/results")).status_code == 404  # admin's own tenant
    r = await api.other_tenant.get("/v1/batches/t1/b1/results", params={"tenant": "tenant-a"})
    assert r.status_code == 403 and error(r)["details"]["field"] == "tenant"


async def test_auth_and_roles(api: Api) -> None:
    r = await api.anon.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": 1})
    assert r.status_code == 401
    r = await api.worker.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": 1})
    assert r.status_code == 403 and "trainer" in error(r)["message"]
    r = await api.trainer.post("/v1/leases", json={"stage": "compile", "worker_id": "w"})
    assert r.status_code == 403
    assert (await api.trainer.get("/v1/stats")).status_code == 403
    assert (await api.admin.get("/v1/stats")).status_code == 200
    assert (await api.anon.get("/healthz")).status_code == 200


async def test_next_at_last_stage_and_missing_result_are_422(api: Api) -> None:
    await register(api)
    await api.trainer.post("/v1/requests", json=req(0, payload={"durations": {"execute": 1.0}}))
    ls = await lease(api, "execute")
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete", json={"worker_id": "w1", "outcome": "next"}
    )
    assert r.status_code == 422 and "outcome" in error(r)["message"]
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete", json={"worker_id": "w1", "outcome": "final"}
    )
    assert r.status_code == 422 and "result" in error(r)["message"]
    r = await api.worker.post(
        f"/v1/leases/{ls['lease_id']}/complete",
        json={"worker_id": "w1", "outcome": "final", "result": {"status": "great"}},
    )
    assert r.status_code == 422 and "result.status" in error(r)["message"]


async def test_synthetic_route_skips_zero_duration_stages(api: Api) -> None:
    await register(api, size=1)
    await api.trainer.post("/v1/requests", json=req(0, payload={"durations": {"compile": 0, "execute": 2}}))
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1", "wait_s": 0})
    assert r.status_code == 204
    assert (await lease(api, "execute"))["request_id"] == "r0"


async def test_metrics_and_stats_reflect_queues(api: Api) -> None:
    await register(api, size=2)
    await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1)]})
    text = (await api.anon.get("/metrics")).text
    assert 'distrs_queue_depth{stage="compile",task="all"} 2.0' in text and "t1" not in text
    stats = (await api.admin.get("/v1/stats")).json()
    assert stats["queues"]["compile"] == 2 and stats["active_batches"][0]["submitted"] == 2


async def test_openapi_is_served(api: Api) -> None:
    r = await api.anon.get("/openapi.json")
    assert r.status_code == 200 and "/v1/requests" in r.json()["paths"]
