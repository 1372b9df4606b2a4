"""The batch results body is exactly the documented ``BatchResults`` model's rendering, byte for
byte, while a batch runs and once it is complete (the route builds it without the model)."""

from __future__ import annotations

import orjson

from distrs.proxy.schemas import BatchResults
from tests.unit.proxy.conftest import Api
from tests.unit.proxy.test_api import lease, register, req


async def expected(api: Api, task: str, batch_id: str) -> bytes:
    scoped = f"tenant-a/{task}"
    batch = await api.store.get_batch(scoped, batch_id)
    assert batch is not None
    results = await api.store.batch_results(scoped, batch_id)
    body = BatchResults(
        task=task,
        batch_id=batch_id,
        size=batch.size,
        done=batch.done,
        complete=batch.complete,
        results=[r.model_dump(mode="json") for r in results],
        extra_delay_s=batch.extra_delay_s,
    )
    return orjson.dumps(body.model_dump(mode="json"))


async def test_results_body_matches_the_model(api: Api) -> None:
    await register(api, size=3)
    r = await api.trainer.post("/v1/requests", json={"requests": [req(0), req(1), req(2)]})
    assert r.status_code == 202
    finals = [
        {"status": "ok", "score": 1.0, "detail": {"x": [1e16, 0.1, -0.0, "é\u2028"], "n": None}},
        {"status": "wrong_answer", "score": 1 / 3, "detail": {}},
        {"status": "runtime_error", "score": 0.0, "detail": {"stderr": "Traceback ...\n"}},
    ]
    for i, final in enumerate(finals):
        ls = await lease(api, "compile")
        done = {"worker_id": "w1", "outcome": "next", "run_s": 0.25, "artifacts": {"bin": "QQ=="}}
        assert (await api.worker.post(f"/v1/leases/{ls['lease_id']}/complete", json=done)).status_code == 200
        ls = await lease(api, "execute")
        done = {"worker_id": "w1", "outcome": "final", "run_s": 1e-7 * (i + 1), "result": final}
        assert (await api.worker.post(f"/v1/leases/{ls['lease_id']}/complete", json=done)).status_code == 200
        api.clock.t += 1.5
        r = await api.trainer.get("/v1/batches/t1/b1/results")
        assert r.status_code == 200
        assert r.content == await expected(api, "t1", "b1")
        body = r.json()
        assert body["done"] == i + 1 and body["complete"] is (i == 2)
        assert [x["status"] for x in body["results"]] == [f["status"] for f in finals[: i + 1]]
    assert r.json()["extra_delay_s"] is not None
