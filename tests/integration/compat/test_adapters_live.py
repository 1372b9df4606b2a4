"""The client's framework adapters (verl, TRL) against the live service."""

from __future__ import annotations

import asyncio
import json

import pytest
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
        assert page["complete"] and page["size"] == 3  # the whole step was one DistRS batch


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
