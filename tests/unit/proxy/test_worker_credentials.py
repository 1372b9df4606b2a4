"""Per-worker credentials (proxy/credentials.py): two workers share the deployment's one worker
token, as every pod of the chart does, and each trades it for a credential of its own. A lease
then belongs to the worker that took it: every call the other worker makes with it (heartbeat,
complete, release, bundle heartbeat, bundle complete) is 403 ``lease_not_yours`` and leaves the
request exactly as it was, re-read after each refusal. Renewal keeps a worker's leases its own;
expiry and revocation end a credential (401 naming why)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from distrs.core.model import RequestState
from distrs.proxy.credentials import CredentialError
from tests.unit.proxy.conftest import Api

TASK = "tenant-a/t1"


def client_like(api: Api, token: str) -> httpx.AsyncClient:
    base = api.worker
    return httpx.AsyncClient(
        transport=base._transport, base_url=str(base.base_url), headers={"Authorization": f"Bearer {token}"}
    )


async def exchange(api: Api, worker_id: str) -> tuple[httpx.AsyncClient, dict[str, Any]]:
    """A worker's own client: the shared worker token traded for a credential bound to ``worker_id``."""
    r = await api.worker.post("/v1/workers/credential", json={"worker_id": worker_id})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert body["worker_id"] == worker_id and body["expires_at"] == api.clock.t + body["ttl_s"]
    return client_like(api, body["credential"]), body


async def submit(api: Api, n: int) -> None:
    r = await api.trainer.post("/v1/batches", json={"task": "t1", "batch_id": "b1", "size": n})
    assert r.status_code == 201, r.text
    reqs = [
        {
            "task": "t1",
            "batch_id": "b1",
            "request_id": f"r{i}",
            "reward_type": "synthetic",
            "payload": {"durations": {"compile": 1.0, "execute": 1.0}},
        }
        for i in range(n)
    ]
    assert (await api.trainer.post("/v1/requests", json={"requests": reqs})).json()["accepted"] == n


async def state_of(api: Api, lease_id: str, rid: str) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was: the lease (holder, deadline, attempt) and
    the request as its trainer reads it."""
    lease = await api.store.get_lease(lease_id)
    assert lease is not None, "the refused call lost the lease"
    rec = await api.store.get_request(TASK, rid)
    assert rec is not None
    public = (await api.trainer.get(f"/v1/requests/t1/{rid}")).json()
    return (lease.holder, lease.deadline, lease.attempt, lease.worker_id, rec.state, rec.stage, rec.attempts,
            len(rec.stages), public)  # fmt: skip


def refused(r: httpx.Response) -> None:
    assert r.status_code == 403, r.text
    err = r.json()["error"]
    assert err["code"] == "lease_not_yours" and err["details"]["field"] == "lease_id"


async def test_the_other_workers_lease_is_refused_on_every_route_and_left_unchanged(api: Api) -> None:
    await submit(api, 3)
    w1, _ = await exchange(api, "w1")
    w2, _ = await exchange(api, "w2")
    try:
        r = await w1.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
        assert r.status_code == 200, r.text
        one = r.json()
        r = await w1.post("/v1/leases/bundle", json={"stage": "compile", "worker_id": "w1", "max_items": 2})
        assert r.status_code == 200, r.text
        bundle = r.json()["leases"]
        assert len(bundle) == 2
        leases = [one, *bundle]
        before = {ls["lease_id"]: await state_of(api, ls["lease_id"], ls["request_id"]) for ls in leases}
        assert before[one["lease_id"]][4] is RequestState.RUNNING
        lid, rid = one["lease_id"], one["request_id"]
        ids = [ls["lease_id"] for ls in leases]
        api.clock.t += 2  # a heartbeat that landed would move the deadline

        refused(await w2.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w2"}))
        assert await state_of(api, lid, rid) == before[lid]
        refused(await w2.post(f"/v1/leases/{lid}/release", json={"worker_id": "w2"}))
        assert await state_of(api, lid, rid) == before[lid]
        done = {"worker_id": "w2", "outcome": "final", "result": {"status": "ok", "score": 1.0}}
        refused(await w2.post(f"/v1/leases/{lid}/complete", json=done))
        assert await state_of(api, lid, rid) == before[lid]
        refused(await w2.post(f"/v1/leases/{lid}/complete", json={"worker_id": "w2", "outcome": "next"}))
        assert await state_of(api, lid, rid) == before[lid]

        r = await w2.post("/v1/leases/heartbeat", json={"worker_id": "w2", "lease_ids": ids})
        assert r.status_code == 200 and r.json()["deadlines"] == {}
        assert {k: v["code"] for k, v in r.json()["errors"].items()} == dict.fromkeys(ids, "lease_not_yours")
        items = [{"lease_id": i, "outcome": "final", "result": {"status": "ok", "score": 1.0}} for i in ids]
        r = await w2.post("/v1/leases/complete", json={"worker_id": "w2", "items": items})
        assert r.status_code == 200
        assert [it["error"]["code"] for it in r.json()["items"]] == ["lease_not_yours"] * 3
        for ls in leases:
            assert await state_of(api, ls["lease_id"], ls["request_id"]) == before[ls["lease_id"]]

        # the shared token itself holds no other worker's lease either
        refused(await api.worker.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"}))
        assert await state_of(api, lid, rid) == before[lid]

        # and the owner still can, after all that
        r = await w1.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"})
        assert r.status_code == 200 and r.json()["deadline"] == api.clock.t + 10
        r = await w1.post("/v1/leases/complete", json={"worker_id": "w1", "items": items})
        assert [it.get("error") for it in r.json()["items"]] == [None] * 3
        assert (await api.trainer.get("/v1/batches/t1/b1/results")).json()["complete"] is True
    finally:
        await w1.aclose()
        await w2.aclose()


async def test_a_credential_speaks_only_for_its_worker_id(api: Api) -> None:
    await submit(api, 1)
    w2, _ = await exchange(api, "w2")
    try:
        for path, body in (
            ("/v1/leases", {"stage": "compile", "worker_id": "w1"}),
            ("/v1/leases/x/heartbeat", {"worker_id": "w1"}),
            ("/v1/workers/credential", {"worker_id": "w1"}),
        ):
            r = await w2.post(path, json=body)
            assert r.status_code == 403 and r.json()["error"]["details"]["field"] == "worker_id", r.text
        assert (await api.store.snapshot(api.clock.t)).running == {}  # nothing was leased
    finally:
        await w2.aclose()


async def test_renewal_keeps_the_lease_and_expiry_and_revocation_end_the_credential(api: Api) -> None:
    await submit(api, 1)
    w1, first = await exchange(api, "w1")
    try:
        r = await w1.post("/v1/leases", json={"stage": "compile", "worker_id": "w1"})
        lid = r.json()["lease_id"]
        while api.clock.t < first["expires_at"] - first["renew_s"]:  # keep the 10 s lease alive
            api.clock.t += 5
            assert (await w1.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"})).status_code == 200
        r = await w1.post("/v1/workers/credential", json={"worker_id": "w1"})
        assert r.status_code == 200 and r.json()["expires_at"] == api.clock.t + first["ttl_s"]
        renewed = client_like(api, r.json()["credential"])
        r = await renewed.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"})
        assert r.status_code == 200, r.text  # the same session: the lease is still its own
        api.clock.t = first["expires_at"]
        r = await w1.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "credential_expired"
        r = await api.worker.delete("/v1/workers/w1/credential")
        assert r.status_code == 403  # only an admin revokes
        r = await api.admin.delete("/v1/workers/w1/credential")
        assert r.status_code == 200 and r.json() == {"worker_id": "w1", "revoked": True}
        r = await renewed.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "credential_revoked"
        api.clock.t += 0.01
        fresh, _ = await exchange(api, "w1")  # a new session: the old lease is not its own
        refused(await fresh.post(f"/v1/leases/{lid}/heartbeat", json={"worker_id": "w1"}))
        await fresh.aclose()
        await renewed.aclose()
    finally:
        await w1.aclose()


async def test_a_tampered_credential_is_refused(api: Api) -> None:
    _, body = await exchange(api, "w1")
    token: str = body["credential"]
    forged = token.replace(".", ".x", 1)  # another worker id, the old signature
    for bad in (forged, token[:-1] + ("0" if token[-1] != "0" else "1"), "dwc1.garbage"):
        c = client_like(api, bad)
        r = await c.post("/v1/leases", json={"stage": "compile", "worker_id": "w1", "wait_s": 0})
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text
        await c.aclose()
    r = await api.trainer.post("/v1/workers/credential", json={"worker_id": "w1"})
    assert r.status_code == 403  # a trainer token gets no worker credential


def test_the_signing_key_is_never_one_anyone_can_compute() -> None:
    from distrs.proxy.credentials import CredentialIssuer, derive_secret

    assert derive_secret([]) != derive_secret([])  # no tokens: a random key per process
    assert derive_secret(["a", "b"]) == derive_secret(["b", "a"])  # replicas agree
    assert derive_secret(["a", "b"]) != derive_secret(["a", "c"])  # a rotated token rotates it
    token, _ = CredentialIssuer(derive_secret(["a"]), 60).issue("w1", 0.0)
    other = CredentialIssuer(derive_secret(["b"]), 60)
    with pytest.raises(CredentialError):
        other.verify(token, 1.0)
