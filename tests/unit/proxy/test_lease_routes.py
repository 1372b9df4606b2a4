"""Worker routes: lease ownership by token, the heartbeat period a lease asks for, and a lease
whose payload cannot be rendered (ended with a clear result, never left held). Every refusal is
followed by a re-read of what it must not have changed (the lease, its deadline and holder, the
request), not only its status code."""

from __future__ import annotations

from typing import Any

import pytest

from distrs.core.model import RequestState, Status
from distrs.store.base import NewRequest
from tests.unit.proxy.conftest import Api

TASK = "tenant-a/t1"  # the store name of tenant-a's task t1 (the proxy scopes tasks by tenant)


async def _submit_direct(api: Api, rid: str, payload: dict[str, Any], size: int = 2) -> None:
    """Put a request in the store as-is (what the ingest routes would refuse to let through)."""
    if await api.store.get_batch(TASK, "b1") is None:
        r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": size})
        assert r.status_code == 201, r.text
    new = NewRequest(
        tenant="tenant-a",
        task=TASK,
        batch_id="b1",
        request_id=rid,
        reward_type="synthetic",
        route=["compile", "execute"],  # the route the proxy gives a synthetic request
        payload=payload,
    )
    assert (await api.store.submit([new], api.clock.t)).accepted == [rid]


async def _state(api: Api, rids: list[str], lease_ids: list[str]) -> tuple[object, ...]:
    """What a refused call must leave as it was: the store's snapshot, the requests, the leases."""
    recs = [await api.store.get_request(TASK, rid) for rid in rids]
    leases = [await api.store.get_lease(lid) for lid in lease_ids]
    snap = await api.store.snapshot(api.clock.t)
    return (
        snap.model_dump(),
        [r.model_dump() if r else None for r in recs],
        [ls.model_dump() if ls else None for ls in leases],
    )


async def test_lease_tells_the_heartbeat_period_and_hides_the_holder(api: Api) -> None:
    await _submit_direct(api, "r0", {"durations": {"compile": 1.0}})
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
    assert r.status_code == 200, r.text
    ls = r.json()
    assert ls["heartbeat_s"] * 3 == 10  # a third of the fixture's 10 s lease TTL
    assert "holder" not in ls and ls["worker_id"] == "w1"
    r = await api.worker.post(f"/v1/leases/{ls['lease_id']}/heartbeat", json={"worker_id": "whatever"})
    assert r.status_code == 200 and r.json()["deadline"] == api.clock.t + 10
    before = await _state(api, ["r0"], [ls["lease_id"]])
    api.clock.t += 1  # a heartbeat that landed would move the deadline
    r = await api.admin.post(f"/v1/leases/{ls['lease_id']}/heartbeat", json={"worker_id": "w1"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "lease_not_yours"
    api.clock.t -= 1
    assert await _state(api, ["r0"], [ls["lease_id"]]) == before


async def test_unrenderable_lease_ends_its_request_and_serves_the_next(api: Api) -> None:
    # a lone surrogate and an integer past 64 bits: the JSON encoder refuses both
    await _submit_direct(api, "bad-str", {"text": "\ud800"}, size=3)
    await _submit_direct(api, "bad-int", {"n": 1 << 70})
    await _submit_direct(api, "good", {"durations": {"compile": 1.0}})
    r = await api.worker.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
    assert r.status_code == 200, r.text
    assert r.json()["request_id"] == "good"
    for rid in ("bad-str", "bad-int"):
        rec = await api.store.get_request(TASK, rid)
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


# bundles -------------------------------------------------------------------------------------


async def _bundle(api: Api, k: int, token_client: Any = None) -> dict[str, Any]:
    c = token_client or api.worker
    r = await c.post("/v1/leases/bundle", json={"stage": "compile", "worker_id": "w1", "max_items": k})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def test_bundle_lease_heartbeat_and_complete_per_request(api: Api) -> None:
    for i in range(4):
        await _submit_direct(api, f"r{i}", {"durations": {"compile": 1.0, "execute": 1.0}}, size=4)
    got = await _bundle(api, 3)
    assert got["heartbeat_s"] * 3 == 10
    assert [x["request_id"] for x in got["leases"]] == ["r0", "r1", "r2"]  # FCFS within the batch
    assert all("holder" not in x for x in got["leases"])
    ids = [x["lease_id"] for x in got["leases"]]
    foreign = (await _bundle(api, 3, api.admin))["leases"]
    assert [x["request_id"] for x in foreign] == ["r3"]
    theirs = await _state(api, ["r3"], [foreign[0]["lease_id"]])
    r3_lease = (await api.store.get_lease(foreign[0]["lease_id"])).model_dump()  # type: ignore[union-attr]
    api.clock.t += 5
    r = await api.worker.post(
        "/v1/leases/heartbeat", json={"worker_id": "w1", "lease_ids": [*ids, foreign[0]["lease_id"]]}
    )
    assert r.status_code == 200, r.text
    hb = r.json()
    assert hb["deadlines"] == dict.fromkeys(ids, api.clock.t + 10)
    assert hb["errors"] == {
        foreign[0]["lease_id"]: {
            "code": "lease_not_yours",
            "message": hb["errors"][foreign[0]["lease_id"]]["message"],
        }
    }
    items = [
        {"lease_id": ids[0], "outcome": "next", "artifacts": {"bin": "AA=="}, "run_s": 0.5},
        {"lease_id": ids[1], "outcome": "final", "run_s": 0.5},  # no result: refused alone
        {"lease_id": foreign[0]["lease_id"], "outcome": "final", "result": {"status": "ok", "score": 1}},
        {
            "lease_id": ids[2],
            "outcome": "final",
            "result": {"status": "wrong_answer", "score": 0},
            "run_s": 0.5,
        },
    ]
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": items})
    assert r.status_code == 200, r.text
    out = r.json()["items"]
    assert [x["lease_id"] for x in out] == [it["lease_id"] for it in items]
    assert out[0]["next_stage"] == "execute" and out[3]["request_id"] == "r2"
    assert out[1]["error"]["code"] == "invalid_request" and "result" in out[1]["error"]["message"]
    assert out[2]["error"]["code"] == "lease_not_yours"
    r2 = await api.store.get_request(TASK, "r2")
    assert r2 is not None and r2.result is not None and r2.result.status is Status.WRONG_ANSWER
    r1 = await api.store.get_request(TASK, "r1")
    assert r1 is not None and r1.state is RequestState.RUNNING  # still its lease, still held
    r1_lease = await api.store.get_lease(ids[1])
    assert r1_lease is not None and r1_lease.deadline == api.clock.t + 10  # the heartbeat's, kept
    # the other token's request: neither the heartbeat nor the completion touched it
    assert (await api.store.get_lease(foreign[0]["lease_id"])).model_dump() == r3_lease  # type: ignore[union-attr]
    assert (await _state(api, ["r3"], [foreign[0]["lease_id"]]))[1:] == theirs[1:]


async def test_bundle_bounds_are_422_naming_the_field(api: Api) -> None:
    await _submit_direct(api, "r0", {"durations": {"compile": 1.0}}, size=2)
    await _submit_direct(api, "r1", {"durations": {"compile": 1.0}})
    held = (await _bundle(api, 1))["leases"][0]["lease_id"]
    before = await _state(api, ["r0", "r1"], [held])
    for body, field in (
        ({"stage": "compile", "worker_id": "w1", "max_items": 0}, "max_items"),
        ({"stage": "compile", "worker_id": "w1", "max_items": 129}, "max_items"),
        ({"stage": "compile", "worker_id": "w1"}, "max_items"),
        ({"stage": "nope", "worker_id": "w1", "max_items": 2}, "stage"),
    ):
        r = await api.worker.post("/v1/leases/bundle", json=body)
        assert r.status_code == 422 and r.json()["error"]["message"].startswith(field), r.text
    r = await api.worker.post("/v1/leases/heartbeat", json={"worker_id": "w1", "lease_ids": ["a"] * 129})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("lease_ids"), r.text
    r = await api.worker.post("/v1/leases/heartbeat", json={"worker_id": "w1", "lease_ids": ["../x"]})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("lease_ids.0"), r.text
    item = {"lease_id": "abc", "outcome": "final", "result": {"status": "ok"}}
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": [item] * 129})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("items"), r.text
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": []})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("items"), r.text
    item = {"lease_id": held, "outcome": "final", "result": {"status": "ok"}}
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": [item] * 129})
    assert r.status_code == 422  # one item too many: none of them lands, the held one included
    r = await api.trainer.post(
        "/v1/leases/bundle", json={"stage": "compile", "worker_id": "w", "max_items": 2}
    )
    assert r.status_code == 403
    r = await api.trainer.post("/v1/leases/complete", json={"worker_id": "w1", "items": [item]})
    assert r.status_code == 403
    assert await _state(api, ["r0", "r1"], [held]) == before  # r1 still queued, r0 still held


async def test_bundle_with_an_unrenderable_request_serves_the_rest(api: Api) -> None:
    await _submit_direct(api, "ok1", {"durations": {"compile": 1.0}}, size=3)
    await _submit_direct(api, "bad", {"text": "\ud800"})
    await _submit_direct(api, "ok2", {"durations": {"compile": 1.0}})
    got = await _bundle(api, 8)
    assert [x["request_id"] for x in got["leases"]] == ["ok1", "ok2"]
    bad = await api.store.get_request(TASK, "bad")
    assert bad is not None and bad.result is not None and bad.result.status is Status.INVALID
    r = await api.worker.post(
        "/v1/leases/bundle", json={"stage": "compile", "worker_id": "w1", "max_items": 2}
    )
    assert r.status_code == 204


def _metric(text: str, name: str, labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_bulk_submit_and_bundle_completion_record_every_request_in_the_metrics(api: Api) -> None:
    r = await api.trainer.post("/v1/batches", json={"task": "m1", "batch_id": "b1", "size": 4})
    assert r.status_code == 201, r.text
    reqs = [
        {"task": "m1", "batch_id": "b1", "request_id": f"r{i}", "reward_type": "synthetic",
         "payload": {"durations": {"compile": 1.0}}}
        for i in range(4)
    ]  # fmt: skip
    r = await api.trainer.post("/v1/requests", json={"requests": reqs})
    assert r.status_code == 202, r.text
    ids = [x["lease_id"] for x in (await _bundle(api, 4))["leases"]]
    statuses = ["ok", "ok", "wrong_answer", "ok"]
    items = [
        {
            "lease_id": lid,
            "outcome": "final",
            "result": {"status": s, "score": 1.0 if s == "ok" else 0.0},
            "run_s": 0.25,
        }
        for lid, s in zip(ids, statuses, strict=True)
    ]
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": items})
    assert r.status_code == 200 and all("error" not in x for x in r.json()["items"]), r.text
    r = await api.trainer.post("/v1/requests", json={"requests": reqs})  # all duplicates now
    assert r.status_code == 202 and r.json()["duplicates"] == 4
    text = (await api.admin.get("/metrics")).text
    assert _metric(text, "distrs_requests_submitted_total", 'reward_type="synthetic"') == 4
    assert _metric(text, "distrs_requests_finished_total", 'status="ok"') == 3
    assert _metric(text, "distrs_requests_finished_total", 'status="wrong_answer"') == 1
    assert _metric(text, "distrs_stage_run_seconds_count", 'stage="compile"') == 4
    assert _metric(text, "distrs_stage_queue_seconds_count", 'stage="compile"') == 4
    assert _metric(text, "distrs_worker_seconds_busy_total", 'stage="compile"') == 1.0
    assert _metric(text, "distrs_batch_extra_delay_seconds_count", "") == 1  # the batch, once


async def test_next_goes_where_the_route_given_at_submit_says_reading_nothing_first(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submission decides a request's whole route (a synthetic request skips the stages its
    payload gives no time); a completion only says ``next``: the store moves it on, and the
    proxy reads nothing about the lease or the request before. Only a refused ``next`` reads the
    lease, once, to tell a request of a release that stored no route (``route_backfill.py``)."""
    r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 2})
    assert r.status_code == 201, r.text
    both = {"durations": {"compile": 1.0, "execute": 1.0}}
    reqs = [
        {"task": "t1", "batch_id": "b1", "request_id": "two", "reward_type": "synthetic", "payload": both},
        {"task": "t1", "batch_id": "b1", "request_id": "one", "reward_type": "synthetic",
         "payload": {"durations": {"compile": 1.0}}},
    ]  # fmt: skip
    assert (await api.trainer.post("/v1/requests", json={"requests": reqs})).status_code == 202

    async def unread(lease_id: str) -> None:
        raise AssertionError("a completion read the lease")

    get_lease = api.store.get_lease
    monkeypatch.setattr(api.store, "get_lease", unread)
    two, one = (await _bundle(api, 2))["leases"]
    assert [two["request_id"], one["request_id"]] == ["two", "one"]
    body = {"worker_id": "w1", "outcome": "next", "run_s": 0.5}
    r = await api.worker.post(f"/v1/leases/{two['lease_id']}/complete", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["next_stage"] == "execute"
    reads: list[str] = []

    async def counted(lease_id: str) -> Any:
        reads.append(lease_id)
        return await get_lease(lease_id)

    monkeypatch.setattr(api.store, "get_lease", counted)
    r = await api.worker.post(f"/v1/leases/{one['lease_id']}/complete", json=body)
    assert r.status_code == 422 and reads == [one["lease_id"]]
    err = r.json()["error"]
    assert err["code"] == "no_next_stage" and err["details"] == {"field": "outcome"}
    assert "'compile'" in err["message"]
    items = [{"lease_id": one["lease_id"], "outcome": "next"}]
    r = await api.worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": items})
    assert r.status_code == 200 and r.json()["items"][0]["error"]["code"] == "no_next_stage"
    assert reads == [one["lease_id"]] * 2
    rec = await api.store.get_request(TASK, "one")
    assert rec is not None and rec.state is RequestState.RUNNING and rec.stages == []  # untouched
    assert rec.route == ["compile"]
