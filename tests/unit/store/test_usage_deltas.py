"""The usage deltas of the completions of one tick are summed and sent once; each caller returns
after the send, and a cancelled caller's delta is sent all the same."""

from __future__ import annotations

import asyncio

from distrs.store.usage_deltas import BatchDelta, DeltaCoalescer, UsageDeltas


def _one(tenant: str, bkey: str, size: int, expiry: float | None = None) -> UsageDeltas:
    d = UsageDeltas()
    d.add(tenant, bkey, 1, size, expiry)
    return d


async def test_deltas_of_one_tick_are_summed_and_sent_once() -> None:
    sent: list[UsageDeltas] = []

    async def send(d: UsageDeltas) -> None:
        sent.append(d)

    b = DeltaCoalescer(send)
    await asyncio.gather(
        b.add(_one("a", "b1", 10)),
        b.add(_one("a", "b1", 5, expiry=99.0)),
        b.add(_one("a", "b2", 7)),
        b.add(_one("c", "b3", 1)),
    )
    assert len(sent) == 1
    got = sent[0]
    assert got.batches[("a", "b1")] == BatchDelta(n=2, size=15, expiry=99.0)
    assert got.batches[("a", "b2")] == BatchDelta(n=1, size=7, expiry=None)
    assert got.tenants == {"a": [3, 22], "c": [1, 1]}
    await b.add(_one("a", "b2", 3))  # a later tick: a send of its own
    assert len(sent) == 2 and sent[1].tenants == {"a": [1, 3]}


async def test_callers_return_after_the_send_and_a_cancelled_one_is_sent_anyway() -> None:
    gate = asyncio.Event()
    sent: list[UsageDeltas] = []

    async def send(d: UsageDeltas) -> None:
        await gate.wait()
        sent.append(d)

    b = DeltaCoalescer(send)
    waiting = asyncio.create_task(b.add(_one("a", "b1", 4)))
    cancelled = asyncio.create_task(b.add(_one("a", "b1", 6)))
    await asyncio.sleep(0.01)
    assert not waiting.done() and not sent  # not before the send
    cancelled.cancel()
    gate.set()
    await waiting
    assert sent and sent[0].tenants == {"a": [2, 10]}


async def test_submissions_and_results_of_one_tick_share_one_send() -> None:
    sent: list[UsageDeltas] = []

    async def send(d: UsageDeltas) -> None:
        sent.append(d)

    b = DeltaCoalescer(send)
    submitted = UsageDeltas()
    submitted.submit("a", "b1", 3)
    submitted.submit("a", "b2", 1)
    again = UsageDeltas()
    again.submit("a", "b1", 2)
    await asyncio.gather(b.add(submitted), b.add(again), b.add(_one("a", "b1", 9)))
    assert len(sent) == 1
    assert sent[0].submitted == {("a", "b1"): 5, ("a", "b2"): 1} and sent[0].tenants_submitted == {"a": 6}
    assert sent[0].batches[("a", "b1")] == BatchDelta(n=1, size=9) and sent[0].tenants == {"a": [1, 9]}
