"""The client's own logic against a fake transport: coalescing, retries, re-submission, order."""

from __future__ import annotations

import asyncio
import random

import pytest
from distrs_client import (
    AsyncRewardClient,
    AuthenticationError,
    ClientClosedError,
    ConflictError,
    ResultsTimeoutError,
    RetryPolicy,
    RewardClient,
    ServiceUnavailableError,
)
from fake_service import FakeService, down_once, status_once


class Sleeps:
    """Records requested sleeps and yields to the loop without waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, s: float) -> None:
        self.calls.append(s)
        await asyncio.sleep(0)


def make(fake: FakeService, **kw: object) -> tuple[AsyncRewardClient, Sleeps]:
    sleeps = Sleeps()
    opts: dict[str, object] = {"transport": fake, "sleep": sleeps, "rng": random.Random(1), "linger_s": 0.002}
    opts.update(kw)
    return AsyncRewardClient("http://fake", **opts), sleeps  # type: ignore[arg-type]


def posts(fake: FakeService) -> list[list[str]]:
    return [[it["request_id"] for it in b["requests"]] for m, p, b in fake.calls if p == "/v1/requests"]


async def test_submit_coalesces_into_bulk_posts_of_at_most_max_bulk() -> None:
    fake = FakeService()
    client, _ = make(fake, max_bulk=4)
    await client.start_batch("t", "b", 10)
    for i in range(10):
        client.submit("t", "b", f"r{i}", "math", {})
    await client.flush()
    bulks = posts(fake)
    assert all(len(b) <= 4 for b in bulks)
    assert len(bulks) <= 4  # coalesced, not one POST per request
    assert [i for b in bulks for i in b] == [f"r{i}" for i in range(10)]
    await client.aclose()


async def test_linger_flushes_a_lone_request_without_an_explicit_flush() -> None:
    fake = FakeService()
    client, _ = make(fake, linger_s=0.01)
    await client.start_batch("t", "b", 1)
    client.submit("t", "b", "only", "math", {})
    assert posts(fake) == []  # submit itself does no I/O
    for _ in range(100):
        await asyncio.sleep(0.005)
        if posts(fake):
            break
    assert posts(fake) == [["only"]]
    await client.aclose()


async def test_submit_from_other_threads_is_coalesced_and_complete() -> None:
    fake = FakeService()
    client, _ = make(fake, max_bulk=64)
    await client.start_batch("t", "b", 400)

    def producer(k: int) -> None:
        for i in range(100):
            client.submit("t", "b", f"r{k}-{i}", "math", {})

    await asyncio.gather(*(asyncio.to_thread(producer, k) for k in range(4)))
    res = await client.results("t", "b", timeout=5)
    assert len(res) == 400 and len({r.request_id for r in res}) == 400
    assert sorted(fake.posted_ids()) == sorted(f"r{k}-{i}" for k in range(4) for i in range(100))
    await client.aclose()


async def test_results_come_back_in_submission_order_even_when_the_service_reorders() -> None:
    fake = FakeService(reverse_results=True)
    client, _ = make(fake)
    await client.start_batch("t", "b", 5)
    for i in range(5):
        client.submit("t", "b", f"r{i}", "math", {"score": i / 10})
    res = await client.results("t", "b", timeout=5)
    assert [r.request_id for r in res] == [f"r{i}" for i in range(5)]
    assert [r.score for r in res] == [0.0, 0.1, 0.2, 0.3, 0.4]
    await client.aclose()


async def test_duplicate_local_submission_is_posted_once() -> None:
    fake = FakeService()
    client, _ = make(fake)
    await client.start_batch("t", "b", 2)
    client.submit("t", "b", "x", "math", {})
    client.submit("t", "b", "x", "math", {})
    client.submit("t", "b", "y", "math", {})
    res = await client.results("t", "b", timeout=5)
    assert fake.posted_ids() == ["x", "y"]
    assert [r.request_id for r in res] == ["x", "y"]
    await client.aclose()


async def test_5xx_is_retried_with_full_jitter_backoff() -> None:
    fake = FakeService()
    policy = RetryPolicy(initial_delay_s=0.1, multiplier=2, max_delay_s=1.0)
    client, sleeps = make(fake, retry=policy)
    fake.faults += [status_once(503), status_once(502), status_once(500)]
    await client.start_batch("t", "b", 1)
    assert ("t", "b") in fake.batches
    assert len(sleeps.calls) == 3
    for n, s in enumerate(sleeps.calls):  # full jitter: uniform in [0, min(cap, base * 2^n)]
        assert 0 <= s <= min(1.0, 0.1 * 2**n)
    await client.aclose()


async def test_429_waits_exactly_retry_after() -> None:
    fake = FakeService()
    client, sleeps = make(fake)
    fake.faults.append(status_once(429, {"retry-after": "1.5"}))
    await client.start_batch("t", "b", 1)
    assert sleeps.calls == [1.5]
    await client.aclose()


async def test_connection_errors_are_retried_then_surface_after_the_budget() -> None:
    fake = FakeService()
    client, sleeps = make(fake)
    fake.faults += [down_once, down_once]
    await client.start_batch("t", "b", 1)  # two refused connections, then through
    assert len(sleeps.calls) == 2 and ("t", "b") in fake.batches
    await client.aclose()

    fake = FakeService()
    client, sleeps = make(fake, retry=RetryPolicy(initial_delay_s=0.5, max_delay_s=0.5, max_elapsed_s=0.0))
    fake.faults.append(down_once)
    with pytest.raises(ServiceUnavailableError):
        await client.start_batch("t", "b", 1)
    assert sleeps.calls == []  # no budget: the first failure surfaces
    await client.aclose()


async def test_4xx_is_not_retried() -> None:
    fake = FakeService()
    client, sleeps = make(fake)
    fake.faults.append(status_once(401))
    with pytest.raises(AuthenticationError):
        await client.start_batch("t", "b", 1)
    assert sleeps.calls == []
    await client.start_batch("t", "b", 1)
    with pytest.raises(ConflictError):
        await client.start_batch("t", "b", 2)
    await client.aclose()


async def test_a_rejected_request_is_isolated_and_does_not_poison_its_bulk() -> None:
    fake = FakeService()
    client, _ = make(fake)
    await client.start_batch("t", "b", 8)
    for i in range(8):
        client.submit("t", "b", f"r{i}", "math", {"bad": 1} if i == 5 else {})
    res = await client.results("t", "b", timeout=5)
    assert [r.request_id for r in res] == [f"r{i}" for i in range(8)]
    assert [r.status for r in res] == ["ok"] * 5 + ["invalid"] + ["ok"] * 2
    assert res[5].detail["error"]["code"] == "invalid_request"
    assert sorted(fake.runs) == sorted(f"r{i}" for i in range(8) if i != 5)
    # the service can never count this batch complete: the client polls briefly, not 20 s
    waits = [q["wait_s"] for m, p, q in fake.params if m == "GET" and p.endswith("/results") and q]
    assert waits and max(waits) <= 1.0
    await client.aclose()


async def test_requests_lost_by_a_restart_are_resubmitted_and_never_run_twice() -> None:
    fake = FakeService(hold=True)
    client, _ = make(fake, poll_wait_s=0.01)
    await client.start_batch("t", "b", 6)
    for i in range(6):
        client.submit("t", "b", f"r{i}", "math", {})
    await client.flush()
    fake.lose_everything()  # the proxy restarted with a memory store
    fake.hold = False
    res = await client.results("t", "b", timeout=5)
    assert [r.request_id for r in res] == [f"r{i}" for i in range(6)]
    # Accepted once before the loss and re-submitted once after it; never a third time.
    assert fake.runs == {f"r{i}": 2 for i in range(6)}
    await client.aclose()


async def test_a_failed_post_is_recovered_by_results_when_the_service_returns() -> None:
    fake = FakeService()
    client, _ = make(fake, retry=RetryPolicy(max_elapsed_s=0.0))
    await client.start_batch("t", "b", 3)
    fake.faults.append(down_once)
    for i in range(3):
        client.submit("t", "b", f"r{i}", "math", {})
    with pytest.raises(ServiceUnavailableError):
        await client.flush()
    res = await client.results("t", "b", timeout=5)
    assert [r.request_id for r in res] == ["r0", "r1", "r2"]
    assert all(v == 1 for v in fake.runs.values())
    await client.aclose()


async def test_submit_waits_for_a_late_batch_registration_by_another_process() -> None:
    fake = FakeService()
    slept: list[float] = []

    async def sleep(s: float) -> None:  # the driver registers the batch while we back off
        slept.append(s)
        if len(slept) == 3:
            fake.batches[("t", "late")] = {"task": "t", "batch_id": "late", "size": 1}
            fake.order[("t", "late")] = []
        await asyncio.sleep(0)

    client, _ = make(fake, sleep=sleep)
    client.submit("t", "late", "r0", "math", {})
    await client.flush()
    assert len(slept) == 3
    assert fake.posted_ids() == ["r0"] * 4 and fake.runs == {"r0": 1}
    await client.aclose()


async def test_results_timeout_carries_partial_results() -> None:
    fake = FakeService(hold=True)
    client, _ = make(fake, poll_wait_s=0.01, sleep=asyncio.sleep)
    await client.start_batch("t", "b", 2)
    client.submit("t", "b", "r0", "math", {})
    with pytest.raises(ResultsTimeoutError) as ei:
        await client.results("t", "b", timeout=0.05)
    assert ei.value.partial == []
    await client.aclose()


async def test_stall_triggers_a_resubmission_probe() -> None:
    fake = FakeService()
    client, _ = make(fake, poll_wait_s=0.001, stall_s=0.0)
    await client.start_batch("t", "b", 2)
    client.submit("t", "b", "r0", "math", {})
    client.submit("t", "b", "r1", "math", {})
    await client.flush()
    # The service silently dropped r1 (e.g. acknowledged just before a crash without persisting).
    del fake.requests[("t", "r1")]
    fake.order[("t", "b")].remove("r1")
    res = await client.results("t", "b", timeout=5)
    assert [r.request_id for r in res] == ["r0", "r1"]
    await client.aclose()


async def test_score_is_a_batch_of_one() -> None:
    fake = FakeService()
    client, _ = make(fake)
    r = await client.score("math", {"score": 0.7}, task="t", request_id="one")
    assert r.request_id == "one" and r.score == 0.7
    (batch,) = fake.batches.values()
    assert batch["size"] == 1 and batch["reward_type"] == "math"
    assert await client.request_state("t", "one") == {"request_id": "one", "state": "done"}
    assert await client.request_state("t", "nope") is None
    await client.aclose()


async def test_closed_client_refuses_work() -> None:
    client, _ = make(FakeService())
    await client.aclose()
    with pytest.raises(ClientClosedError):
        client.submit("t", "b", "r", "math", {})


def test_blocking_client_wraps_the_same_logic() -> None:
    fake = FakeService(reverse_results=True)
    with RewardClient("http://fake", transport=fake, linger_s=0.001) as client:
        client.start_batch("t", "b", 3, "math")
        for i in range(3):
            client.submit("t", "b", f"r{i}", "math", {"score": 0.5})
        res = client.results("t", "b", timeout=5)
        assert [r.request_id for r in res] == ["r0", "r1", "r2"]
        assert client.score("math", {"score": 0.25}, task="t").score == 0.25
    with pytest.raises(ClientClosedError):
        client.submit("t", "b", "r9", "math", {})


async def test_local_copies_are_bounded_to_max_batches() -> None:
    fake = FakeService()
    client, _ = make(fake, max_batches=3)
    for k in range(5):
        fake.batches[("t", f"b{k}")] = {"task": "t", "batch_id": f"b{k}", "size": 1}
        fake.order[("t", f"b{k}")] = []
        client.submit("t", f"b{k}", f"r{k}", "math", {})
    await client.flush()
    assert sorted(fake.runs) == [f"r{k}" for k in range(5)]  # all posted
    assert [b for _, b in client._batches] == ["b2", "b3", "b4"]  # only the newest kept
    await client.aclose()
