"""Adapters (TRL, verl) and rollout hooks against the fake transport."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from distrs_client import Response, RewardClient
from distrs_client.adapters import verl as verl_adapter
from distrs_client.adapters.common import cases_from, reward_type_for
from distrs_client.adapters.trl import DistrsReward, completion_text
from distrs_client.hooks import ThreadRolloutHook, submit_finished
from fake_service import FakeService


class ScoringFake(FakeService):
    """Scores math as 1.0 when the completion contains the ground truth, code by its test count."""

    async def request(self, method: str, path: str, *, body: Any = None, **options: Any) -> Response:
        if method == "POST" and path == "/v1/requests":
            for it in body["requests"]:
                p = it["payload"]
                if "completion" in p:
                    p["score"] = 1.0 if p["ground_truth"] and p["ground_truth"] in p["completion"] else 0.0
                elif "code" in p:
                    p["score"] = len(p["tests"]) / 10
        return await super().request(method, path, body=body, **options)


@pytest.fixture
def fake_client() -> Iterator[tuple[ScoringFake, RewardClient]]:
    fake = ScoringFake()
    client = RewardClient("http://fake", transport=fake, linger_s=0.001)
    yield fake, client
    client.close()


def test_trl_reward_scores_a_step_as_one_batch(fake_client: tuple[ScoringFake, RewardClient]) -> None:
    fake, client = fake_client
    f = DistrsReward(client=client, reward_type="math")
    assert f.__name__ == "distrs_math"
    completions = [
        [{"role": "assistant", "content": "the answer is 4"}],
        [{"role": "assistant", "content": "it is 5"}],
    ]
    out = f(["p1", "p2"], completions, ground_truth=["4", "4"])
    assert out == [1.0, 0.0]
    assert len(fake.batches) == 1 and next(iter(fake.batches.values()))["size"] == 2


def test_trl_reward_reads_code_tests_and_per_row_types(fake_client: tuple[ScoringFake, RewardClient]) -> None:
    fake, client = fake_client
    f = DistrsReward(client=client, reward_type="math")
    tests = json.dumps({"inputs": ["1", "2"], "outputs": ["1", "2"]})
    out = f(
        ["p", "q"],
        ["```python\nprint(input())\n```", "x = 3"],
        reward_type=["python", "math"],
        tests=[tests, None],
        solution=["", "3"],
    )
    assert out == [0.2, 1.0]
    code_req = next(r for (t, rid), r in fake.requests.items() if r["reward_type"] == "python")
    assert code_req["payload"]["code"] == "print(input())\n"


def test_completion_text_forms() -> None:
    assert completion_text("a") == "a"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]) == "b"
    assert completion_text({"content": "c"}) == "c"


def test_verl_functions_use_the_shared_client(
    fake_client: tuple[ScoringFake, RewardClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, client = fake_client
    monkeypatch.setattr(verl_adapter, "shared_client", lambda url=None, token=None: client)
    assert verl_adapter.compute_score("openai/gsm8k", "so 42", "42") == 1.0
    assert verl_adapter.compute_score("openai/gsm8k", "so 41", "42", extra_info={}) == 0.0
    scores = verl_adapter.compute_score_batch(
        ["math", "codecontests-python"],
        ["42", "```python\nprint(1)\n```"],
        ["42", {"inputs": ["", ""], "outputs": ["1", "1"]}],
        [None, None],
        batch_id="step-3",
    )
    assert scores == [1.0, 0.2]
    assert ("verl", "step-3") in fake.batches


def test_reward_type_and_tests_helpers() -> None:
    assert reward_type_for("x", {"reward_type": "cuda"}, "math") == "cuda"
    assert reward_type_for("kernelbench-cuda", None, "math") == "cuda"
    assert reward_type_for("gsm8k", None, "math") == "math"
    assert cases_from('[{"stdin": "1", "expected_stdout": "2"}]') == [{"stdin": "1", "expected_stdout": "2"}]
    assert cases_from("not json") == []


def test_thread_hook_submits_without_blocking_and_gathers_in_order(
    fake_client: tuple[ScoringFake, RewardClient],
) -> None:
    fake, client = fake_client
    hook = ThreadRolloutHook(client, "t", "math")
    hook.start_batch("b", 20)
    assert fake.batches[("t", "b")]["size"] == 20
    for i in reversed(range(20)):  # finish order differs from index order
        hook.on_finish("b", f"r{i}", f"answer {i}", ground_truth=str(i))
    res = hook.results("b", timeout=10)
    assert [r.request_id for r in res] == [f"r{i}" for i in reversed(range(20))]
    assert all(r.score == 1.0 for r in res)
    assert hook.errors == []
    hook.close()


def test_thread_hook_keeps_payload_errors_for_the_caller(
    fake_client: tuple[ScoringFake, RewardClient],
) -> None:
    _, client = fake_client

    def broken(reward_type: str, completion: str, **_: object) -> dict[str, object]:
        raise ValueError("cannot parse")

    hook = ThreadRolloutHook(client, "t", "math", payload_fn=broken)
    hook.on_finish("b", "r0", "x")
    hook.drain(timeout=5)
    assert [type(e) for e in hook.errors] == [ValueError]
    hook.close()


def test_submit_finished_extracts_and_flushes(
    fake_client: tuple[ScoringFake, RewardClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, client = fake_client
    import distrs_client.hooks as hooks

    monkeypatch.setattr(hooks, "shared_client", lambda url=None, token=None: client)
    client.start_batch("t", "b", 1, "cpp")
    text = "draft\n```cpp\nint main(){}\n```\n"
    assert submit_finished(None, None, "t", "b", "r0", "cpp", text, {"tests": []}) == "r0"
    assert fake.requests[("t", "r0")]["payload"]["code"] == "int main(){}\n"


def test_ray_remote_function_when_ray_is_installed() -> None:
    ray = pytest.importorskip("ray")
    from distrs_client.hooks import ray_submit_fn

    fn = ray_submit_fn()
    assert hasattr(fn, "remote")
    assert "ray" in sys.modules and ray is not None


def test_shared_async_client_is_per_event_loop() -> None:
    import asyncio

    from distrs_client.shared import shared_async_client

    async def get() -> object:
        c = shared_async_client("http://fake-a", None)
        assert c is shared_async_client("http://fake-a", None)  # cached within the loop
        c._bind()
        return c

    first = asyncio.run(get())
    second = asyncio.run(get())  # a new loop (possibly the same id) gets its own client
    assert first is not second


def test_call_based_ground_truth_carries_fn_name() -> None:
    from distrs_client.adapters.common import payload_for

    gt = {"inputs": ["[1]\n2"], "outputs": ["3"], "fn_name": "add"}
    p = payload_for("python", "```python\ndef add(a, b): return a[0] + b\n```", gt, None)
    assert p["fn_name"] == "add" and p["tests"] == [{"stdin": "[1]\n2", "expected_stdout": "3"}]
    assert "fn_name" not in payload_for("cpp", "```cpp\nint main(){}\n```", gt, None)
    assert "fn_name" not in payload_for("python", "x", {"inputs": ["1"], "outputs": ["1"]}, None)
