"""Worker routes: lease ownership by token, the heartbeat period a lease asks for, and a lease
whose payload cannot be rendered (ended with a clear result, never left held)."""

from __future__ import annotations

from typing import Any

from distrs.core.model import RequestState, Status
from distrs.store.base import NewRequest
from tests.unit.proxy.conftest import Api


async def _submit_direct(api: Api, rid: str, payload: dict[str, Any], size: int = 2) -> None:
    """Put a request in the store as-is (what the ingest routes would refuse to let through)."""
    if await api.store.get_batch("t1", "b1") is None:
        r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": size})
        assert r.status_code == 201, r.text
    new = NewRequest(
        tenant="tenant-a",
        task="t1",
        batch_id="b1",
        request_id=rid,
        reward_type="synthetic",
        first_stage="compile",
        payload=payload,
    )
    assert (await api.store.submit([new], api.clock.t)).accepted == [rid]


async def test_lease_tells_the_heartbeat_period_and_hides_the_holder(api: Api) -> None:
    await _submit_direct(api, "r0", {"durations": {"compile": 1.0}})
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
    assert r.status_code == 200, r.text
    ls = r.json()
    assert ls["heartbeat_s"] * 3 == 10  # a third of the fixture's 10 s lease TTL
    assert "holder" not in ls and ls["worker_id"] == "w1"
    r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/heartbeat", json={"worker_id": "whatever"})
    assert r.status_code == 200 and r.json()["deadline"] == api.clock.t + 10
    r = await api.admin.post(f"/v1/leases/{ls['lease_id']}/heartbeat", json={"worker_id": "w1"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "lease_not_yours"


async def test_unrenderable_lease_ends_its_request_and_serves_the_next(api: Api) -> None:
    # a lone surrogate and an integer past 64 bits: the JSON encoder refuses both
    await _submit_direct(api, "bad-str", {"text": "\ud800"}, size=3)
    await _submit_direct(api, "bad-int", {"n": 1 << 70})
    await _submit_direct(api, "good", {"durations": {"compile": 1.0}})
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
    assert r.status_code == 200, r.text
    assert r.json()["request_id"] == "good"
    for rid in ("bad-str", "bad-int"):
        rec = await api.store.get_request("t1", rid)
        assert rec is not None and rec.state is RequestState.DONE and rec.result is not None
        assert rec.result.status is Status.INVALID
        assert "cannot be encoded as JSON" in rec.result.detail["error"]
    assert await api.store.get_lease(r.json()["lease_id"]) is not None
    assert (await api.store.snapshot(api.clock.t)).running == {"compile": 1}  # nothing else held
    r = await api.trainer.get("/v1/batches/t1/b1/results")
    assert r.status_code == 200
    assert sorted(x["request_id"] for x in r.json()["results"]) == ["bad-int", "bad-str"]
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
    assert r.status_code == 204
