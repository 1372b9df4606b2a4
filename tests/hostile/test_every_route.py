"""Every route under hostile input: malformed JSON, oversize bodies, lone surrogates, bad ids,
missing/unknown/wrong-role tokens and another tenant's names. Each answer is a 4xx with the
error body naming the problem, never a 500, and afterwards nothing was queued by the barrage
while legitimate work still goes through.

The refusals are aimed at real state: before each barrage tenant-a has a batch with one request
leased by the worker (its lease id stands in every lease path and body) and one queued, and after
it the whole store is re-read (snapshot, both requests, the lease with its holder and deadline):
a refused call that acted anyway would show there, not only in its status code."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.hostile.conftest import Hostile, work


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    role: str  # client allowed to call it
    body: dict[str, Any] | None = None  # a valid body (None: no body)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


SID = "s" + "0" * 24  # a session id of the right form that no session has
REQ = {
    "task": "t1",
    "batch_id": "b1",
    "request_id": "r0",
    "reward_type": "math",
    "payload": {"completion": "4"},
}
ROUTES = [
    Route("POST", "/v1/batches", "a", {"task": "t1", "batch_id": "b1", "size": 1}),
    Route("POST", "/v1/requests", "a", REQ),
    Route("GET", "/v1/requests/t1/r0", "a"),
    Route("GET", "/v1/batches/t1/b1/results", "a"),
    Route("GET", "/v1/batches/t1/b1/events", "a"),
    Route("POST", "/v1/leases", "worker", {"stage": "verify", "worker_id": "w1", "wait_s": 0}),
    Route("POST", "/v1/leases/L1/heartbeat", "worker", {"worker_id": "w1"}),
    Route("POST", "/v1/leases/L1/release", "worker", {"worker_id": "w1"}),
    Route(
        "POST",
        "/v1/leases/L1/complete",
        "worker",
        {"worker_id": "w1", "outcome": "final", "result": {"status": "ok", "score": 1.0}},
    ),
    Route("POST", "/v1/leases/bundle", "worker", {"stage": "verify", "worker_id": "w1", "max_items": 2}),
    Route("POST", "/v1/leases/heartbeat", "worker", {"worker_id": "w1", "lease_ids": ["L1"]}),
    Route(
        "POST",
        "/v1/leases/complete",
        "worker",
        {"worker_id": "w1", "items": [{"lease_id": "L1", "outcome": "final", "result": {"status": "ok"}}]},
    ),
    Route("POST", "/v1/workers/credential", "worker", {"worker_id": "w1"}),
    Route("DELETE", "/v1/workers/w1/credential", "admin"),
    Route("GET", "/v1/stats", "admin"),
    Route("GET", "/v1/usage", "a"),
    Route("POST", "/run_code", "a", {"code": "print(1)", "language": "python"}),
    Route("POST", "/get_reward", "a", {"query": ["Px"], "prompts": ["P"]}),
    Route("POST", "/slime/reward", "a", {"response": "x", "label": "1"}),
    Route("POST", "/v1/sessions", "a", {"task": "t1", "language": "python"}),
    Route("POST", f"/v1/sessions/{SID}/exec", "a", {"code": "1"}),
    Route("GET", f"/v1/sessions/{SID}", "a"),
    Route("DELETE", f"/v1/sessions/{SID}", "a"),
    Route("GET", f"/v1/sessions/{SID}/files", "a"),
    Route(
        "POST",
        f"/v1/sessions/{SID}/reward",
        "a",
        {"reward_type": "tests", "payload": {"tests": [{"code": "1"}]}},
    ),
    Route("POST", "/v1/session-ops/poll", "worker", {"worker_id": "w1", "capacity": 1, "wait_s": 0}),
    Route("POST", "/v1/session-ops/complete", "worker", {"worker_id": "w1", "items": []}),
    Route("POST", "/v1/session-ops/release", "worker", {"worker_id": "w1", "sessions": []}),
]
BODY_ROUTES = [r for r in ROUTES if r.body is not None]
COMPAT_HEADERS = {"X-DistRS-Timeout": "0.05"}


def check_error(r: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert r.status_code in statuses, (r.status_code, r.text)
    err: dict[str, Any] = r.json()["error"]
    assert err["code"] and err["message"], r.text
    return err


HELD_TASK = "tenant-a/held"


@dataclass
class Held:
    """A real request leased by the worker, and one queued: what every refused call must leave."""

    hostile: Hostile
    lease_id: str
    before: Any = None

    async def state(self) -> Any:
        store = self.hostile.store
        lease = await store.get_lease(self.lease_id)
        recs = [await store.get_request(HELD_TASK, rid) for rid in ("h0", "h1")]
        assert lease is not None and all(recs), "the held state is gone"
        return (
            (await store.snapshot(0.0)).model_dump(),
            [r.model_dump() for r in recs if r is not None],
            lease.model_dump(),
            (await self.hostile.a.get("/v1/requests/held/h0")).json(),
        )

    async def assert_unchanged(self) -> None:
        assert await self.state() == self.before


@pytest.fixture
async def held(hostile: Hostile) -> Held:
    r = await hostile.a.post("/v1/batches", json={"task": "held", "batch_id": "hb", "size": 2})
    assert r.status_code == 201, r.text
    reqs = [{**REQ, "task": "held", "batch_id": "hb", "request_id": rid} for rid in ("h0", "h1")]
    assert (await hostile.a.post("/v1/requests", json={"requests": reqs})).json()["accepted"] == 2
    r = await hostile.worker.post("/v1/leases", json={"stage": "verify", "worker_id": "w1", "wait_s": 0})
    assert r.status_code == 200 and r.json()["request_id"] == "h0", r.text
    h = Held(hostile, r.json()["lease_id"])
    h.before = await h.state()
    return h


def aimed(route: Route, held: Held) -> Route:
    """``route`` with its placeholder lease id replaced by the held lease's."""
    body = route.body
    if body is not None:
        body = json.loads(json.dumps(body).replace('"L1"', json.dumps(held.lease_id)))
    return Route(route.method, route.path.replace("/L1/", f"/{held.lease_id}/"), route.role, body)


async def call(c: httpx.AsyncClient, route: Route, **kw: Any) -> httpx.Response:
    headers = {**COMPAT_HEADERS, "Content-Type": "application/json", **kw.pop("headers", {})}
    return await c.request(route.method, route.path, headers=headers, **kw)


MALFORMED = (b'{"task": ', b"", b"[1, 2", b"\xff\xfe{}", b'{"a": NaN}', b"[1e400]", b'{"a": "\xed\xa0\x80"}')


@pytest.mark.parametrize("route", BODY_ROUTES, ids=str)
async def test_malformed_json_is_400(hostile: Hostile, held: Held, route: Route) -> None:
    """Not JSON, not UTF-8 (a UTF-16 BOM, an encoded surrogate), NaN, a number past a double:
    400 ``malformed_json`` on every route, worker routes included."""
    route = aimed(route, held)
    for raw in MALFORMED:
        r = await call(hostile.by_name(route.role), route, content=raw)
        err = check_error(r, 400)
        assert err["code"] == "malformed_json", (raw, err)
    await held.assert_unchanged()


@pytest.mark.parametrize("route", BODY_ROUTES, ids=str)
async def test_oversize_body_is_413_before_it_is_read(hostile: Hostile, held: Held, route: Route) -> None:
    route = aimed(route, held)
    raw = b'{"x": "' + b"a" * (300 * 1024) + b'"}'
    err = check_error(await call(hostile.by_name(route.role), route, content=raw), 413)
    assert err["code"] == "body_too_large"
    await held.assert_unchanged()


@pytest.mark.parametrize("route", BODY_ROUTES, ids=str)
async def test_lone_surrogate_is_refused(hostile: Hostile, held: Held, route: Route) -> None:
    """A lone surrogate in any string of any body: a 4xx, never queued, never a 500."""
    route = aimed(route, held)
    assert route.body is not None
    key = next(k for k, v in route.body.items() if isinstance(v, (str, list)))
    body = dict(route.body)
    body[key] = ["\ud800"] if isinstance(body[key], list) else "x\ud800"
    raw = httpx_json(body)
    err = check_error(await call(hostile.by_name(route.role), route, content=raw), 422)
    assert err["code"] == "invalid_string" and err["details"]["field"].startswith(key), err
    assert err["message"].startswith(key), err
    await held.assert_unchanged()


WORKER_SURROGATES = [
    ("/v1/leases", {"stage": "verify", "worker_id": "w", "wait_s": 0, "x": {"k": "\udc00"}}, "x.k"),
    (
        "/v1/leases/L1/complete",
        {
            "worker_id": "w",
            "outcome": "final",
            "result": {"status": "ok", "detail": {"log": ["ok", "\ud83d"]}},
        },
        "result.detail.log.1",
    ),
    ("/v1/leases/heartbeat", {"worker_id": "w", "lease_ids": ["L1", "L\udfff"]}, "lease_ids.1"),
    (
        "/v1/leases/complete",
        {"worker_id": "w", "items": [{"lease_id": "L1", "outcome": "next", "artifacts": {"bin": "\ud800"}}]},
        "items.0.artifacts.bin",
    ),
]


@pytest.mark.parametrize(("path", "body", "field"), WORKER_SURROGATES, ids=[c[0] for c in WORKER_SURROGATES])
async def test_worker_routes_name_the_field_holding_a_lone_surrogate(
    hostile: Hostile, held: Held, path: str, body: dict[str, Any], field: str
) -> None:
    """Worker routes read bodies like every other route: a surrogate nested anywhere is a 422
    naming its field (not a 400 naming nothing), and nothing of the call takes effect."""
    raw = httpx_json(body).replace(b'"L1"', json.dumps(held.lease_id).encode())
    r = await hostile.worker.post(
        path.replace("/L1/", f"/{held.lease_id}/"), content=raw, headers={"Content-Type": "application/json"}
    )
    err = check_error(r, 422)
    assert err["code"] == "invalid_string" and err["details"]["field"] == field, err
    assert err["message"].startswith(field), err
    await held.assert_unchanged()


def httpx_json(body: dict[str, Any]) -> bytes:
    """``body`` as JSON with non-ASCII escaped, so a lone surrogate is written as ``\\ud800``."""
    import json

    return json.dumps(body).encode()


@pytest.mark.parametrize("route", ROUTES, ids=str)
async def test_missing_unknown_and_wrong_role_tokens(hostile: Hostile, held: Held, route: Route) -> None:
    route = aimed(route, held)
    kw = {"json": route.body} if route.body is not None else {}
    for name in ("anon", "bad"):
        err = check_error(await call(hostile.by_name(name), route, **kw), 401)
        assert err["code"] == "unauthorized"
    wrong = {"a": "worker", "worker": "a", "admin": "a"}[route.role]
    err = check_error(await call(hostile.by_name(wrong), route, **kw), 403)
    assert err["code"] == "forbidden"
    if route.role != "admin":  # the metrics role reads /metrics and nothing else
        check_error(await call(hostile.metrics, route, **kw), 403)
    await held.assert_unchanged()


BAD_IDS = ["a b", "a\x01b", "x" * 201, "a%00b", "caf\u00e9", "a:b;c", "~/x", "a\tb"]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_bad_ids_in_bodies_are_422_naming_the_field(hostile: Hostile, bad: str) -> None:
    cases = [
        ("/v1/batches", {"task": bad, "batch_id": "b", "size": 1}, "task"),
        ("/v1/batches", {"task": "t", "batch_id": bad, "size": 1}, "batch_id"),
        ("/v1/requests", {**REQ, "request_id": bad}, "request_id"),
        ("/v1/requests", {"requests": [REQ, {**REQ, "task": bad}]}, "requests.1.task"),
    ]
    for path, body, field in cases:
        err = check_error(await hostile.a.post(path, json=body), 422)
        assert err["message"].startswith(field), err
    worker_cases = [
        ("/v1/leases", {"stage": bad, "worker_id": "w"}, "stage"),
        ("/v1/leases", {"stage": "verify", "worker_id": bad}, "worker_id"),
    ]
    for path, body, field in worker_cases:
        err = check_error(await hostile.worker.post(path, json=body), 422)
        assert err["message"].startswith(field), err
    # a slash is refused outright: TENANT/TASK stays unambiguous
    err = check_error(
        await hostile.a.post("/v1/batches", json={"task": "x/y", "batch_id": "b", "size": 1}), 422
    )
    assert err["message"].startswith("task")


@pytest.mark.parametrize("bad", ["a b", "x" * 201, "caf%C3%A9", "a%01b", "a;b"])
async def test_bad_ids_in_paths_are_4xx_naming_the_parameter(hostile: Hostile, bad: str) -> None:
    for path, field in (
        (f"/v1/requests/{bad}/r0", "task"),
        (f"/v1/requests/t1/{bad}", "request_id"),
        (f"/v1/batches/{bad}/b1/results", "task"),
        (f"/v1/batches/t1/{bad}/results", "batch_id"),
        (f"/v1/batches/t1/{bad}/events", "batch_id"),
    ):
        err = check_error(await hostile.a.get(path), 422)
        assert err["message"].startswith(f"path.{field}"), err
    err = check_error(
        await hostile.a.post(
            "/get_reward", json={"query": ["Px"], "prompts": ["P"]}, headers={"X-DistRS-Task": bad}
        ),
        422,
    )
    assert err["details"]["field"] == "X-DistRS-Task"


@pytest.mark.parametrize("bad", ["a b", "x" * 201, "caf%C3%A9", "a%01b", "a;b", "a%2Fb"])
async def test_bad_lease_ids_are_422_naming_the_field(hostile: Hostile, bad: str) -> None:
    """Lease ids follow the one id rule, in paths and in bundle bodies alike."""
    for op, body in (
        ("heartbeat", {"worker_id": "w1"}),
        ("release", {"worker_id": "w1"}),
        ("complete", {"worker_id": "w1", "outcome": "final", "result": {"status": "ok"}}),
    ):
        r = await hostile.worker.post(f"/v1/leases/{bad}/{op}", json=body)
        if "%2F" in bad:  # routed as two path segments: no such route
            check_error(r, 404)
            continue
        assert check_error(r, 422)["message"].startswith("path.lease_id"), r.text
    raw = bad.replace("%C3%A9", "\u00e9").replace("%01", "\u0001").replace("%2F", "/")
    for path, body, field in (
        ("/v1/leases/heartbeat", {"worker_id": "w1", "lease_ids": ["L1", raw]}, "lease_ids.1"),
        (
            "/v1/leases/complete",
            {"worker_id": "w1", "items": [{"lease_id": raw, "outcome": "final", "result": {"status": "ok"}}]},
            "items.0.lease_id",
        ),
    ):
        err = check_error(await hostile.worker.post(path, json=body), 422)
        assert err["message"].startswith(field), err
    err = check_error(
        await hostile.worker.post(
            "/v1/leases/bundle", json={"stage": raw, "worker_id": "w1", "max_items": 2}
        ),
        422,
    )
    assert err["message"].startswith("stage"), err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "601", "1e9", "ten"])
async def test_x_distrs_timeout_outside_its_range_is_422_naming_the_header(
    hostile: Hostile, value: str
) -> None:
    """X-DistRS-Timeout is a number of seconds in (0, compat_wait_s]; nothing is registered."""
    for path, body in (
        ("/get_reward", {"query": ["Px"], "prompts": ["P"]}),
        ("/run_code", {"code": "print(1)", "language": "python"}),
    ):
        err = check_error(await hostile.a.post(path, json=body, headers={"X-DistRS-Timeout": value}), 422)
        assert err["details"]["field"] == "X-DistRS-Timeout" and err["message"].startswith("X-DistRS-Timeout")
    assert (await hostile.store.snapshot(0.0)).batches == []


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400", "3601", "soon"])
async def test_wait_s_query_outside_its_range_is_422_naming_it(hostile: Hostile, value: str) -> None:
    await hostile.a.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 1})
    err = check_error(await hostile.a.get("/v1/batches/t1/b1/results", params={"wait_s": value}), 422)
    assert err["message"].startswith("query.wait_s"), err


async def test_slash_in_a_path_id_never_reaches_another_name(hostile: Hostile) -> None:
    await hostile.a.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 1})
    for path in ("/v1/batches/t1%2Fb1/b1/results", "/v1/batches/tenant-a%2Ft1/b1/results"):
        check_error(await hostile.b.get(path), 404, 422)


async def test_another_tenants_names_are_unknown(hostile: Hostile) -> None:
    r = await hostile.a.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": 2})
    assert r.status_code == 201
    assert (await hostile.a.post("/v1/requests", json=REQ)).status_code == 202
    for path in ("/v1/requests/t1/r0", "/v1/batches/t1/b1/results", "/v1/batches/t1/b1/events"):
        err = check_error(await hostile.b.get(path), 404)
        assert "tenant-a" not in err["message"]
    # B submitting into "t1/b1" only ever reaches its own (unregistered) batch
    check_error(await hostile.b.post("/v1/requests", json={**REQ, "request_id": "evil"}), 404)
    # nor may B name tenant-a explicitly
    err = check_error(await hostile.b.get("/v1/requests/t1/r0", params={"tenant": "tenant-a"}), 403)
    assert err["details"]["field"] == "tenant"
    # A's request is untouched and still A's only
    r = await hostile.a.get("/v1/requests/t1/r0")
    assert r.status_code == 200 and r.json()["state"] == "queued" and r.json()["task"] == "t1"
    snap = await hostile.store.snapshot(0.0)
    assert [(b.batch.tenant, b.batch.task, b.batch.submitted) for b in snap.batches] == [
        ("tenant-a", "tenant-a/t1", 1)
    ]


async def test_after_the_barrage_legitimate_work_completes(hostile: Hostile) -> None:
    for route in BODY_ROUTES:
        await call(hostile.by_name(route.role), route, content=b'{"oops"')
        await call(hostile.by_name(route.role), route, content=b'{"a": "\\udfff"}')
    stop = asyncio.Event()
    worker = asyncio.create_task(work(hostile.worker, ["verify"], stop))
    try:
        r = await hostile.a.post(
            "/get_reward",
            json={
                "query": ["Q: the answer is 42", "Q: it is 41"],
                "prompts": ["Q:", "Q:"],
                "labels": ["42", "42"],
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["rewards"] == [1.0, 0.0]
    finally:
        stop.set()
        assert await worker == 2
