"""Per-worker credentials with real processes and the worker's real HTTP client: two workers
given the same shared worker token (as every pod of the chart is) each trade it for a credential
of their own on their first call, and one cannot heartbeat, complete or release the other's lease.
Over Redis with two proxy replicas, a credential issued by one is honoured by the other (it is
signed with a key both derive from the worker token), so a worker may reach either."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from distrs.worker.proxy_client import HttpProxyClient, LeaseRejected
from tests.fixtures.service import WORKER, running_service

pytestmark = pytest.mark.slow


def _submit(c: object, n: int) -> None:
    import httpx

    assert isinstance(c, httpx.Client)
    assert c.post("/v1/batches", json={"task": "cred", "batch_id": "b1", "size": n}).status_code == 201
    reqs = [
        {"task": "cred", "batch_id": "b1", "request_id": f"r{i}", "reward_type": "synthetic",
         "payload": {"durations": {"compile": 0.1}}}
        for i in range(n)
    ]  # fmt: skip
    r = c.post("/v1/requests", json={"requests": reqs})
    assert r.status_code == 202 and r.json()["accepted"] == n, r.text


def _refused(call: object) -> None:
    with pytest.raises(LeaseRejected) as e:
        call()  # type: ignore[operator]
    assert e.value.status == 403 and "lease_not_yours" in str(e.value.body)


@pytest.mark.parametrize("backend", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_two_workers_sharing_the_worker_token_cannot_touch_each_others_leases(
    backend: str, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("fresh_redis_server").url if backend == "redis" else None
    with ExitStack() as stack:
        svc = stack.enter_context(running_service(workers={}, redis_url=redis_url))
        # over Redis, the second worker talks to a second proxy replica of the same store
        other = stack.enter_context(running_service(workers={}, redis_url=redis_url)) if redis_url else svc
        _submit(svc.client(), 2)
        now = [0.0]
        a = HttpProxyClient(svc.url, WORKER, clock=lambda: now[0])
        b = HttpProxyClient(other.url, WORKER)
        stack.callback(a.close)
        stack.callback(b.close)
        lease = a.lease("compile", "w1", 5.0)
        assert lease is not None and a.credential is not None and a.credential.startswith("dwc1.")
        assert b.lease("compile", "w2", 5.0) is not None
        assert b.credential is not None and b.credential != a.credential
        lid = lease["lease_id"]
        _refused(lambda: b.heartbeat(lid, "w2"))
        _refused(lambda: b.release(lid, "w2"))
        _refused(lambda: b.complete(lid, {"worker_id": "w2", "outcome": "final", "result": {"status": "ok"}}))
        assert b.heartbeat_bundle([lid], "w2") == {lid}
        state = svc.client().get(f"/v1/requests/cred/{lease['request_id']}").json()
        assert state["state"] == "running" and state.get("result") is None
        a.heartbeat(lid, "w1")  # its owner still holds it, on either replica
        first = a.credential
        now[0] += 10_000  # past the renewal point: the next call renews, the lease stays its own
        a.heartbeat(lid, "w1")
        assert a.credential != first and a.credential is not None
        if redis_url:
            a2 = HttpProxyClient(other.url, WORKER)
            stack.callback(a2.close)
            a2._credential, a2._worker_id, a2._renew_at = a.credential, "w1", float("inf")
            a2.heartbeat(lid, "w1")
        out = a.complete(
            lid, {"worker_id": "w1", "outcome": "final", "result": {"status": "ok", "score": 1.0}}
        )
        assert out["request_id"] == lease["request_id"]
