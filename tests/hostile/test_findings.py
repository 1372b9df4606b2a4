"""One test per edge finding: task squatting, compat routes bypassing the bulk/payload limits,
lone surrogates reaching a lease, tenant names on /metrics, and store outages answered 500."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from distrs.config import ProxySettings
from distrs.proxy.app import create_app
from tests.hostile.conftest import TOKENS, Hostile, clients, work


async def test_a_tenant_cannot_squat_another_tenants_compat_task(hostile: Hostile) -> None:
    """B registers every name A's /get_reward could derive (old and new); A's calls still work."""
    for task in ("openrlhf", "openrlhf.tenant-a", "sandboxfusion", "sandboxfusion.tenant-a"):
        for batch in ("b0", "gr-1"):
            r = await hostile.b.post("/v1/batches", json={"task": task, "batch_id": batch, "size": 5})
            assert r.status_code == 201, r.text
    stop = asyncio.Event()
    worker = asyncio.create_task(work(hostile.worker, ["verify"], stop))
    try:
        body = {"query": ["Q=42", "Q=7"], "prompts": ["Q", "Q"], "labels": ["42", "42"]}
        r = await hostile.a.post("/get_reward", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["rewards"] == [1.0, 0.0]
        # the same with A naming the batch B registered under the same names
        r = await hostile.a.post(
            "/get_reward",
            json={"query": ["Q=42"], "prompts": ["Q"], "labels": ["42"]},
            headers={"X-DistRS-Batch": "gr-1"},
        )
        assert r.status_code == 200 and r.json()["rewards"] == [1.0], r.text
    finally:
        stop.set()
        assert await worker == 3
    # B's batches are untouched: still empty, still B's
    r = await hostile.b.get("/v1/batches/openrlhf/gr-1/results")
    assert r.status_code == 200 and r.json()["done"] == 0 and r.json()["size"] == 5
    # the admin sees each tenant's task under that tenant
    stats = (await hostile.admin.get("/v1/stats")).json()
    owners = {(b["tenant"], b["task"]) for b in stats["active_batches"]}
    assert ("tenant-b", "openrlhf") in owners and all(t == "tenant-b" for t, _ in owners)


async def test_get_reward_is_held_to_the_bulk_limit(hostile: Hostile) -> None:
    """20,000 rows in one /get_reward call are refused like an oversize bulk submit."""
    r = await hostile.a.post("/get_reward", json={"query": ["x"] * 20_000})
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == "too_many_requests_in_bulk" and err["details"]["field"] == "query"
    r = await hostile.a.post("/v1/requests", json={"requests": [{"x": 1}] * 20_000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_requests_in_bulk"
    assert (await hostile.store.snapshot(0.0)).batches == []


async def test_get_reward_and_run_code_are_held_to_the_payload_limit(hostile: Hostile) -> None:
    r = await hostile.a.post("/get_reward", json={"query": ["Pok", "P" + "y" * 5000], "prompts": ["P", "P"]})
    assert r.status_code == 413, r.text
    assert r.json()["error"]["details"]["field"] == "query.1"
    # /run_code has its own, larger limit (run_code_max_payload_bytes, for SandboxFusion's stdin
    # and files): past it is a 413 naming the limit, before anything is registered
    r = await hostile.a.post("/run_code", json={"code": "#" * 9000, "language": "python"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large", r.text
    assert "8192" in r.json()["error"]["message"]
    assert (await hostile.store.snapshot(0.0)).batches == []


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/get_reward", b'{"query": ["fine", "bad \\ud800"]}', "query.1"),
        ("/get_reward", b'{"query": ["fine"], "labels": [{"k": "\\udc00"}]}', "labels.0.k"),
        ("/run_code", b'{"code": "print(1)", "stdin": "\\ud83d"}', "stdin"),
        ("/slime/reward", b'{"response": "x", "label": {"tests": ["\\udfff"]}}', "label.tests.0"),
        (
            "/v1/requests",
            b'{"requests": [{"task": "t", "batch_id": "b", "request_id": "r", "reward_type": "math",'
            b' "payload": {"completion": "\\ud800", "ground_truth": "1"}}]}',
            "requests.0.payload.completion",
        ),
    ],
)
async def test_lone_surrogates_are_refused_at_the_edge_naming_the_field(
    hostile: Hostile, path: str, raw: bytes, field: str
) -> None:
    r = await hostile.a.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_string" and err["details"]["field"] == field, err
    assert err["message"].startswith(field)
    # nothing queued, so no lease can ever fail to render
    r = await hostile.worker.post("/v1/leases", json={"stage": "verify", "worker_id": "w", "wait_s": 0})
    assert r.status_code == 204
    r = await hostile.worker.post("/v1/leases", json={"stage": "run", "worker_id": "w", "wait_s": 0})
    assert r.status_code == 204


async def test_metrics_name_no_tenant_by_default(hostile: Hostile) -> None:
    await hostile.a.post("/v1/batches", json={"task": "secret-task", "batch_id": "b1", "size": 1})
    await hostile.a.post(
        "/v1/requests",
        json={
            "task": "secret-task",
            "batch_id": "b1",
            "request_id": "r",
            "reward_type": "math",
            "payload": {"completion": "1", "ground_truth": "1"},
        },
    )
    text = (await hostile.anon.get("/metrics")).text
    assert 'distrs_queue_depth{stage="verify",task="all"} 1.0' in text
    assert "secret-task" not in text and "tenant-a" not in text


@pytest.mark.parametrize(
    "hostile", [{"metrics_auth": True, "metrics_tenant_labels": True, "docs_enabled": False}], indirect=True
)
async def test_metrics_auth_tenant_labels_and_docs_are_configurable(hostile: Hostile) -> None:
    await hostile.a.post("/v1/batches", json={"task": "t9", "batch_id": "b1", "size": 1})
    await hostile.a.post(
        "/v1/requests",
        json={"task": "t9", "batch_id": "b1", "request_id": "r", "reward_type": "math", "payload": {}},
    )
    assert (await hostile.anon.get("/metrics")).status_code == 401
    assert (await hostile.bad.get("/metrics")).status_code == 401
    assert (await hostile.a.get("/metrics")).status_code == 403
    assert (await hostile.worker.get("/metrics")).status_code == 403
    for c in (hostile.metrics, hostile.admin):
        r = await c.get("/metrics")
        assert r.status_code == 200
        assert 'distrs_queue_depth{stage="verify",task="tenant-a/t9"} 1.0' in r.text
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert (await hostile.anon.get(path)).status_code == 404
    assert (await hostile.anon.get("/healthz")).status_code == 200


async def test_an_unreachable_store_answers_503_with_retry_after(unused_tcp_port: int) -> None:
    """A real Redis client against a port nothing listens on: every store call fails to connect."""
    settings = ProxySettings(
        tokens=TOKENS, redis_url=f"redis://127.0.0.1:{unused_tcp_port}/0", redis_connect_timeout_s=0.5
    )
    app = create_app(settings)
    cs = clients(app)
    try:
        calls: list[tuple[httpx.AsyncClient, str, str, dict[str, object] | None]] = [
            (cs["a"], "POST", "/v1/batches", {"task": "t", "batch_id": "b", "size": 1}),
            (
                cs["a"],
                "POST",
                "/v1/requests",
                {"task": "t", "batch_id": "b", "request_id": "r", "reward_type": "math", "payload": {}},
            ),
            (cs["a"], "GET", "/v1/requests/t/r", None),
            (cs["a"], "GET", "/v1/batches/t/b/results", None),
            (cs["worker"], "POST", "/v1/leases", {"stage": "verify", "worker_id": "w", "wait_s": 0}),
            (cs["worker"], "POST", "/v1/leases/L/heartbeat", {"worker_id": "w"}),
            (cs["admin"], "GET", "/v1/stats", None),
            (cs["a"], "POST", "/get_reward", {"query": ["Px"], "prompts": ["P"]}),
        ]
        for c, method, path, body in calls:
            r = await c.request(method, path, json=body)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert int(r.headers["Retry-After"]) >= 1
            assert r.json()["error"]["code"] == "store_unavailable"
        assert (await cs["anon"].get("/readyz")).status_code == 503
    finally:
        for c in cs.values():
            await c.aclose()


async def test_a_backdated_or_future_rollout_start_is_held_to_the_skew(hostile: Hostile) -> None:
    """EBF ranks batches by T estimated from rollout_started_at: a tenant backdating it to 0 would
    go ahead of every other tenant's batch; it is clamped to [now - skew, now] instead."""
    before = time.time()
    r = await hostile.b.post(
        "/v1/batches", json={"task": "t", "batch_id": "old", "size": 1, "rollout_started_at": 0.0}
    )
    assert r.status_code == 201, r.text
    skew = ProxySettings.model_fields["rollout_start_skew_s"].default
    assert r.json()["rollout_started_at"] >= before - skew - 1
    r = await hostile.b.post(
        "/v1/batches", json={"task": "t", "batch_id": "new", "size": 1, "rollout_started_at": 4e12}
    )
    assert r.status_code == 201, r.text
    assert r.json()["rollout_started_at"] <= time.time() + 1
    honest = time.time() - 5
    r = await hostile.a.post(
        "/v1/batches", json={"task": "t", "batch_id": "h", "size": 1, "rollout_started_at": honest}
    )
    assert r.json()["rollout_started_at"] == pytest.approx(honest)
    r = await hostile.a.post(
        "/v1/batches", json={"task": "t", "batch_id": "n", "size": 1, "rollout_started_at": "NaN"}
    )
    assert r.status_code == 422 and "rollout_started_at" in r.text
