"""Faults are never a score: the adapters retry ``internal_error`` and then mark or raise
(``distrs_client/adapters/faults.py``), against the fake transport."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from distrs_client import AsyncRewardClient, Response, RewardClient, RewardFaultError
from distrs_client.adapters import verl as verl_adapter
from distrs_client.adapters.trl import DistrsReward
from fake_service import FakeService


class FlakyFake(FakeService):
    """A request whose payload holds ``"faults": N`` ends internal_error the first N times that
    payload is submitted (under any request id), then ``ok``."""

    seen: dict[str, int]

    async def request(self, method: str, path: str, *, body: Any = None, **options: Any) -> Response:
        if method == "POST" and path == "/v1/requests":
            for it in body["requests"]:
                p = it["payload"]
                key = json.dumps(
                    {k: v for k, v in p.items() if k not in ("status", "detail")}, sort_keys=True
                )
                n = self.seen[key] = self.seen.get(key, 0) + 1
                if n <= int(p.get("faults", 0)):
                    it["payload"] = {
                        **p,
                        "status": "internal_error",
                        "score": 0.0,
                        "detail": {"error": "sandbox down"},
                    }
        return await super().request(method, path, body=body, **options)


@pytest.fixture
def flaky() -> Iterator[tuple[FlakyFake, RewardClient]]:
    fake = FlakyFake()
    fake.seen = {}
    client = RewardClient("http://fake", transport=fake, linger_s=0.001)
    yield fake, client
    client.close()


@pytest.fixture
def verl_on(flaky: tuple[FlakyFake, RewardClient], monkeypatch: pytest.MonkeyPatch) -> FlakyFake:
    fake, client = flaky
    monkeypatch.setattr(verl_adapter, "shared_client", lambda url=None, token=None: client)
    return fake


def opts(faults: int) -> dict[str, Any]:
    return {"reward_type": "synthetic", "reward_options": {"faults": faults}}


def test_verl_retries_a_transient_fault_and_logs_it_once(
    verl_on: FlakyFake, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="distrs_client.adapters"):
        assert verl_adapter.compute_score("s", "x", None, opts(2)) == 1.0
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "sandbox down" in msgs[0] and "1 of 1" in msgs[0]
    batches = sorted(b for _, b in verl_on.batches)
    assert len(batches) == 3 and sum(b.endswith(("-f1", "-f2")) for b in batches) == 2


def test_verl_persistent_fault_raises_never_zero(verl_on: FlakyFake) -> None:
    with pytest.raises(RewardFaultError) as e:
        verl_adapter.compute_score_batch(["s", "s"], ["x", "y"], [None, None], [opts(0), opts(9)])
    assert e.value.attempts == 3 and e.value.cause == "sandbox down"
    assert [r.status for r in e.value.results] == ["ok", "internal_error"]
    out = verl_adapter.compute_score_batch(
        ["s"] * 2, ["x", "y"], [None] * 2, [opts(0), opts(9)], on_fault="mark"
    )
    assert out == [{"score": 1.0, "distrs_fault": 0.0}, {"score": 0.0, "distrs_fault": 1.0}]
    with pytest.raises(ValueError, match="on_fault"):
        verl_adapter.compute_score("s", "x", None, opts(0), on_fault="zero")


def test_verl_async_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FlakyFake()
    fake.seen = {}

    async def main() -> Any:
        client = AsyncRewardClient("http://fake", transport=fake, linger_s=0.001)
        monkeypatch.setattr(verl_adapter, "shared_async_client", lambda url=None, token=None: client)
        try:
            ok = await verl_adapter.compute_score_async("s", "x", None, opts(1))
            with pytest.raises(RewardFaultError):
                await verl_adapter.compute_score_async("s", "z", None, opts(5), fault_retries=1)
            return ok
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 1.0


def test_trl_retries_then_gives_none(
    flaky: tuple[FlakyFake, RewardClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    import distrs_client.adapters.trl as trl_mod

    _, client = flaky
    real = trl_mod.payload_for
    faults = {"a": 1, "b": 7, "c": 1}  # "a" and "c" fail once, "b" every time
    monkeypatch.setattr(
        trl_mod,
        "payload_for",
        lambda rt, text, gt, extra: {**real(rt, text, gt, extra), "faults": faults[text]},
    )
    f = DistrsReward(client=client, reward_type="synthetic")
    assert f(["p", "p"], ["a", "b"]) == [1.0, None]  # "a" recovered on retry; "b": no reward, not 0
    assert DistrsReward(client=client, reward_type="synthetic", fault_retries=0)(["p"], ["c"]) == [None]
