"""Completions of requests with no stored route (``proxy/route_backfill.py``), through the proxy on
the memory store. The flows take the store, so tests/integration/test_route_backfill_redis.py
runs them on a real Redis, standalone and Cluster.

A request of the release that stored no route is written here as that release wrote it: its
first stage only (``NewRequest.route`` of one stage, which the Redis store keeps as a hash
without ``route``, the old release's very shape)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from distrs.core.model import RequestState, Status
from distrs.proxy.route_backfill import goes_on
from distrs.store.base import NewRequest, QueueStore
from distrs.store.errors import Unavailable
from distrs.store.memory import MemoryStore
from distrs.store.redis import RedisStore
from tests.unit.proxy.conftest import Clock
from tests.unit.proxy.test_quotas import proxy

TASK = "tenant-a/t"  # the store name of tenant-a's task t
BOTH = {"durations": {"compile": 1.0, "execute": 1.0}}  # a synthetic request of two stages


class Calls:
    """Counts the store calls of a completion (the store's own methods, wrapped on the instance)."""

    def __init__(self, store: QueueStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n: dict[str, int] = {}
        for name in ("complete", "complete_many", "get_lease", "store_route"):
            monkeypatch.setattr(store, name, self._counted(name, getattr(store, name)))

    def _counted(self, name: str, fn: Any) -> Any:
        async def call(*args: Any, **kw: Any) -> Any:
            self.n[name] = self.n.get(name, 0) + 1
            return await fn(*args, **kw)

        return call

    def take(self) -> dict[str, int]:
        out, self.n = self.n, {}
        return out


async def submit_old(store: QueueStore, clock: Clock, *rids: str, payload: Any = None) -> None:
    """Requests as the release that stored no route submitted them: their first stage only."""
    news = [
        NewRequest(
            tenant="tenant-a",
            task=TASK,
            batch_id="b",
            request_id=rid,
            reward_type="synthetic",
            route=["compile"],
            payload=BOTH if payload is None else payload,
        )
        for rid in rids
    ]
    assert (await store.submit(news, clock.t)).accepted == list(rids)
    if isinstance(store, RedisStore):  # the old release's hash: no ``route`` field
        client: Any = store.topology.client
        for rid in rids:
            assert not await client.hexists(store.keys.request(TASK, rid), "route")


async def register(trainer: httpx.AsyncClient, size: int) -> None:
    r = await trainer.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": size})
    assert r.status_code == 201, r.text


async def lease(worker: httpx.AsyncClient, stage: str, k: int = 1) -> list[dict[str, Any]]:
    r = await worker.post("/v1/leases/bundle", json={"stage": stage, "worker_id": "w1", "max_items": k})
    assert r.status_code == 200, r.text
    leases: list[dict[str, Any]] = r.json()["leases"]
    assert len(leases) == k
    return leases


async def complete(worker: httpx.AsyncClient, lease_id: str, outcome: str = "next") -> httpx.Response:
    body: dict[str, Any] = {"worker_id": "w1", "outcome": outcome, "run_s": 0.5}
    if outcome == "final":
        body["result"] = {"status": "ok", "score": 1.0}
    else:
        body["artifacts"] = {"bin": lease_id}
    return await worker.post(f"/v1/leases/{lease_id}/complete", json=body)


async def complete_bundle(
    worker: httpx.AsyncClient, lease_ids: list[str], outcome: str = "next"
) -> list[Any]:
    items: list[dict[str, Any]] = []
    for lid in lease_ids:
        it: dict[str, Any] = {"lease_id": lid, "outcome": outcome, "run_s": 0.5}
        it |= (
            {"result": {"status": "ok", "score": 1.0}} if outcome == "final" else {"artifacts": {"bin": lid}}
        )
        items.append(it)
    r = await worker.post("/v1/leases/complete", json={"worker_id": "w1", "items": items})
    assert r.status_code == 200, r.text
    answers: list[Any] = r.json()["items"]
    return answers


# flows (any store) --------------------------------------------------------------------------------


async def old_requests_reach_their_next_stage_and_result(
    store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests of the old release, completed ``next`` alone and in a bundle, go on to their next
    stage with their artifacts and end with their result; the refused call is read once, its
    route stored once and the completion sent again once."""
    clock = Clock()
    async with proxy(store, clock) as client:
        trainer, worker = client("ta"), client("wk")
        await register(trainer, size=3)
        await submit_old(store, clock, "one", "two", "three")
        calls = Calls(store, monkeypatch)
        (first,) = await lease(worker, "compile")
        r = await complete(worker, first["lease_id"])
        assert r.status_code == 200, r.text
        assert r.json()["next_stage"] == "execute" and r.json()["request_id"] == "one"
        assert calls.take() == {"complete": 2, "get_lease": 1, "store_route": 1}
        rec = await store.get_request(TASK, "one")
        assert rec is not None and rec.route == ["compile", "execute"] and rec.state is RequestState.QUEUED
        bundle = await lease(worker, "compile", 2)
        answers = await complete_bundle(worker, [ls["lease_id"] for ls in bundle])
        assert [a.get("next_stage") for a in answers] == ["execute", "execute"], answers
        assert calls.take() == {"complete_many": 2, "get_lease": 2, "store_route": 2}
        # the next stage: the artifacts arrive, the results land, the batch completes
        held = await lease(worker, "execute", 3)
        assert {ls["request_id"]: ls["artifacts"] for ls in held} == {
            ls["request_id"]: {"bin": ls["lease_id"]} for ls in [first, *bundle]
        }
        r = await complete(worker, held[0]["lease_id"], "final")
        assert r.status_code == 200 and r.json()["next_stage"] is None
        answers = await complete_bundle(worker, [ls["lease_id"] for ls in held[1:]], "final")
        assert [a["batch_completed"] for a in answers] == [False, True], answers
        assert calls.take() == {"complete": 1, "complete_many": 1}  # nothing more on the way
        r = await trainer.get("/v1/batches/t/b/results")
        results = r.json()["results"]
        assert r.json()["complete"] and len(results) == 3
        for res in results:
            assert res["status"] == Status.OK.value
            assert [s["name"] for s in res["stages"]] == ["compile", "execute"]
            assert [s["outcome"] for s in res["stages"]] == ["next", "final"]


async def a_route_that_ends_there_is_still_refused(
    store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``next`` at the last stage of a stored route, and at the end of an old request's computed
    route, is refused as before: nothing stored, nothing sent again, nothing changed."""
    clock = Clock()
    async with proxy(store, clock) as client:
        trainer, worker = client("ta"), client("wk")
        await register(trainer, size=2)
        req = {"task": "t", "batch_id": "b", "request_id": "new", "reward_type": "synthetic", "payload": BOTH}
        assert (await trainer.post("/v1/requests", json=req)).status_code == 202
        await submit_old(store, clock, "short", payload={"durations": {"compile": 1.0}})
        new, short = await lease(worker, "compile", 2)
        assert [new["request_id"], short["request_id"]] == ["new", "short"]
        r = await complete(worker, new["lease_id"])
        assert r.status_code == 200 and r.json()["next_stage"] == "execute"
        (at_end,) = await lease(worker, "execute")
        calls = Calls(store, monkeypatch)
        for lid in (at_end["lease_id"], short["lease_id"]):
            r = await complete(worker, lid)
            assert r.status_code == 422 and r.json()["error"]["code"] == "no_next_stage", r.text
        assert calls.take() == {"complete": 2, "get_lease": 2}
        answers = await complete_bundle(worker, [at_end["lease_id"], short["lease_id"]])
        assert [a["error"]["code"] for a in answers] == ["no_next_stage"] * 2
        assert calls.take() == {"complete_many": 1, "get_lease": 2}
        for rid, route in (("new", ["compile", "execute"]), ("short", ["compile"])):
            rec = await store.get_request(TASK, rid)
            assert rec is not None and rec.state is RequestState.RUNNING and rec.route == route
        r = await complete(worker, at_end["lease_id"], "final")  # the leases are still held
        assert r.status_code == 200, r.text


async def a_completion_goes_again_at_most_once(store: QueueStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that keeps refusing (here: it claims to store the route and does not) is asked
    again once per completion, alone or in a bundle, and its second refusal is the answer."""
    clock = Clock()
    async with proxy(store, clock) as client:
        trainer, worker = client("ta"), client("wk")
        await register(trainer, size=2)
        await submit_old(store, clock, "a", "b")

        async def claims_stored(task: str, request_id: str, route: Any) -> bool:
            return True

        monkeypatch.setattr(store, "store_route", claims_stored)
        calls = Calls(store, monkeypatch)
        a, b = await lease(worker, "compile", 2)
        r = await complete(worker, a["lease_id"])
        assert r.status_code == 422 and r.json()["error"]["code"] == "no_next_stage"
        assert calls.take() == {"complete": 2, "get_lease": 1, "store_route": 1}
        answers = await complete_bundle(worker, [a["lease_id"], b["lease_id"]])
        assert [x["error"]["code"] for x in answers] == ["no_next_stage"] * 2
        assert calls.take() == {"complete_many": 2, "get_lease": 2, "store_route": 2}
        for rid in ("a", "b"):
            rec = await store.get_request(TASK, rid)
            assert rec is not None and rec.state is RequestState.RUNNING and rec.stages == []


FLOWS = [
    old_requests_reach_their_next_stage_and_result,
    a_route_that_ends_there_is_still_refused,
    a_completion_goes_again_at_most_once,
]


@pytest.mark.parametrize("flow", FLOWS, ids=[f.__name__ for f in FLOWS])
async def test_flows_on_the_memory_store(flow: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await flow(MemoryStore(), monkeypatch)


# pieces --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "stage", "expected"),
    [
        (["compile", "execute"], "compile", True),
        (["compile", "execute"], "execute", False),
        (["compile"], "compile", False),
        (["execute"], "compile", False),  # not on the route
        ([], "compile", False),
    ],
)
def test_goes_on(stages: list[str], stage: str, expected: bool) -> None:
    assert goes_on(stages, stage) is expected


async def test_a_store_failure_in_a_bundle_answers_for_its_item_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other items of the bundle have landed: a failure on the way to a retry answers for the
    item it concerns, and the others keep their answers."""
    store = MemoryStore()
    clock = Clock()
    async with proxy(store, clock) as client:
        trainer, worker = client("ta"), client("wk")
        await register(trainer, size=2)
        req = {"task": "t", "batch_id": "b", "request_id": "new", "reward_type": "synthetic", "payload": BOTH}
        assert (await trainer.post("/v1/requests", json=req)).status_code == 202
        await submit_old(store, clock, "old")

        async def down(task: str, request_id: str, route: Any) -> bool:
            raise Unavailable("redis unavailable: test")

        monkeypatch.setattr(store, "store_route", down)
        new, old = await lease(worker, "compile", 2)
        answers = await complete_bundle(worker, [new["lease_id"], old["lease_id"]])
        assert answers[0]["next_stage"] == "execute"
        assert answers[1]["error"]["code"] == "store_unavailable"
        r = await complete(worker, old["lease_id"])  # alone: the call itself answers 503
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
