"""The client's framework adapters (verl, TRL) against the live service."""

from __future__ import annotations

import asyncio
import json

import pytest
from distrs_client import RewardFaultError
from distrs_client.adapters import verl
from distrs_client.adapters.trl import DistrsReward

from tests.fixtures.service import TRAINER_A, Service


@pytest.fixture
def env(compat_service: Service, monkeypatch: pytest.MonkeyPatch) -> Service:
    monkeypatch.setenv("DISTRS_URL", compat_service.url)
    monkeypatch.setenv("DISTRS_TOKEN", TRAINER_A)
    return compat_service


def test_verl_per_sample_and_batch(env: Service) -> None:
    assert verl.compute_score("openai/gsm8k", "so the answer is \\boxed{72}", "72") == 1.0
    assert verl.compute_score("openai/gsm8k", "so the answer is \\boxed{71}", "72", extra_info={}) == 0.0
    tests = json.dumps({"inputs": ["4\n", "5\n"], "outputs": ["8\n", "10\n"]})
    scores = verl.compute_score_batch(
        ["math", "codecontests-python", "codecontests-python"],
        ["\\boxed{3}", "```python\nprint(int(input()) * 2)\n```", "no code at all"],
        ["3", tests, tests],
        [None, None, None],
        task="verl-live",
        batch_id="verl-step-1",
    )
    assert scores == [1.0, 1.0, 0.0]
    with env.client() as c:
        page = c.get("/v1/batches/verl-live/verl-step-1/results").json()
        # the whole step was one DistRS batch; the completion without a code block scores 0.0
        # without a round trip, as verl's own path scores it
        assert page["complete"] and page["size"] == 2


def test_verl_async_variant(env: Service) -> None:
    async def main() -> list[float]:
        return list(
            await asyncio.gather(
                verl.compute_score_async("gsm8k", "\\boxed{10}", "10"),
                verl.compute_score_async("gsm8k", "\\boxed{11}", "10"),
            )
        )

    assert asyncio.run(main()) == [1.0, 0.0]


def test_trl_reward_function(env: Service) -> None:
    f = DistrsReward(task="trl-live")
    completions = [[{"role": "assistant", "content": "\\boxed{2}"}], [{"role": "assistant", "content": "3"}]]
    assert f(["1+1?", "1+1?"], completions, ground_truth=["2", "2"]) == [1.0, 0.0]


def test_verl_call_based_fn_name(env: Service) -> None:
    """verl's code datasets carry LeetCode-style tests as {inputs, outputs, fn_name}."""
    gt = json.dumps({"inputs": ["[1, 2, 3]", "[5]"], "outputs": ["6", "5"], "fn_name": "total"})
    good = "```python\nclass Solution:\n    def total(self, xs):\n        return sum(xs)\n```"
    bad = "```python\ndef total(xs):\n    return max(xs)\n```"
    assert verl.compute_score("leetcode-python", good, gt) == 1.0
    assert verl.compute_score("leetcode-python", bad, gt) == 0.5  # max is right for [5] only


# A synthetic request that ends internal_error at its (only) stage: a service fault every time.
FAULT = {"reward_type": "synthetic", "reward_options": {"fail_stage": "compile", "status": "internal_error"}}
FINE = {"reward_type": "synthetic", "reward_options": {}}


def test_verl_never_scores_a_fault_it_retries_then_raises(
    env: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level("WARNING", logger="distrs_client.adapters"),
        pytest.raises(RewardFaultError, match="internal_error after 3 attempts"),
    ):
        verl.compute_score("synthetic", "x", None, FAULT, task="verl-fault")
    assert len([r for r in caplog.records if "ended internal_error" in r.getMessage()]) == 1  # logged once
    with pytest.raises(RewardFaultError):
        verl.compute_score_batch(["s", "s"], ["x", "y"], [None, None], [FINE, FAULT], task="verl-fault")

    async def run() -> float | dict[str, float]:
        return await verl.compute_score_async("s", "x", None, FAULT, task="verl-fault", fault_retries=0)

    with pytest.raises(RewardFaultError, match="after 1 attempts"):
        asyncio.run(run())


def test_verl_on_fault_mark_returns_verls_dict_form(env: Service) -> None:
    got = verl.compute_score_batch(
        ["s", "s"],
        ["x", "y"],
        [None, None],
        [FINE, FAULT],
        task="verl-fault",
        on_fault="mark",
        batch_id="mark-1",
    )
    assert got == [{"score": 1.0, "distrs_fault": 0.0}, {"score": 0.0, "distrs_fault": 1.0}]
    with env.client() as c:  # the faulted request was tried three times, each under a new batch
        for b in ("mark-1", "mark-1-f1", "mark-1-f2"):
            assert c.get(f"/v1/batches/verl-fault/{b}/results").json()["complete"]
