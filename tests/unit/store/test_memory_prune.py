"""The memory store forgets a finished batch (and its requests) once it is older than
``result_ttl_s``, on the next registration; a batch registered again under the same id after that
is a new batch, kept until it too has expired."""

from __future__ import annotations

from distrs.core.model import BatchInfo, Completion, Result, Status
from distrs.store.base import NewRequest
from distrs.store.memory import MemoryStore

TTL = 100.0


def _req(batch: str, rid: str) -> NewRequest:
    return NewRequest(
        tenant="default",
        task="t",
        batch_id=batch,
        request_id=rid,
        reward_type="synthetic",
        route=["compile"],
        payload={},
    )


async def _finish(store: MemoryStore, batch: str, rid: str, now: float) -> None:
    await store.register_batch(BatchInfo(task="t", batch_id=batch, size=1), now)
    await store.submit([_req(batch, rid)], now)
    lease = await store.lease("compile", "w", now, 30.0)
    assert lease is not None and lease.request_id == rid
    result = Result(request_id=rid, status=Status.OK, score=1.0)
    out = await store.complete(Completion(lease_id=lease.lease_id, run_s=1.0, result=result), "w", now + 1.0)
    assert out.batch_completed


async def test_finished_batches_are_forgotten_after_the_ttl_only() -> None:
    store = MemoryStore(result_ttl_s=TTL)
    await _finish(store, "a", "ra", 0.0)  # completed at 1
    await _finish(store, "b", "rb", 50.0)  # completed at 51
    await store.register_batch(BatchInfo(task="t", batch_id="x", size=1), 100.5)
    assert await store.get_batch("t", "a") is not None  # 99.5 s old: kept
    await store.register_batch(BatchInfo(task="t", batch_id="y", size=1), 101.5)
    assert await store.get_batch("t", "a") is None and await store.get_request("t", "ra") is None
    assert await store.get_batch("t", "b") is not None and await store.get_request("t", "rb") is not None


async def test_a_batch_registered_again_after_expiry_is_kept_until_it_expires() -> None:
    store = MemoryStore(result_ttl_s=TTL)
    await _finish(store, "a", "r1", 0.0)  # completed at 1, forgotten after 101
    await _finish(store, "a", "r2", 150.0)  # the same id again, completed at 151
    assert (await store.get_batch("t", "a")) is not None
    await store.register_batch(BatchInfo(task="t", batch_id="x", size=1), 200.0)
    got = await store.get_batch("t", "a")
    assert got is not None and got.completed_at == 151.0 and await store.get_request("t", "r2") is not None
    await store.register_batch(BatchInfo(task="t", batch_id="z", size=1), 252.0)
    assert await store.get_batch("t", "a") is None
