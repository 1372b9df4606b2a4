"""OpenRLHF ``POST /get_reward`` spoken as OpenRLHF's remote reward client speaks it."""

from __future__ import annotations

import json

import requests

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_clients import openrlhf_remote_rm_fn

PROMPT = "What is 6 * 7? Put the answer in \\boxed{}.\n"


def url(svc: Service) -> str:
    return f"{svc.url}/get_reward?token={TRAINER_A}"


def test_math_rewards_in_query_order(compat_service: Service) -> None:
    responses = ["It is \\boxed{42}.", "It is \\boxed{41}.", "6*7 = \\boxed{42}", "no idea"]
    out, attempts = openrlhf_remote_rm_fn(
        url(compat_service), [PROMPT + r for r in responses], [PROMPT] * 4, ["42"] * 4
    )
    assert attempts == 1
    assert out["rewards"] == [1.0, 0.0, 1.0, 0.0]
    assert out["scores"] == out["rewards"]
    logs = out["extra_logs"]
    assert all(len(v) == 4 for v in logs.values())  # per-sample, as OpenRLHF logs them
    assert logs["distrs_internal_error"] == [0.0] * 4


def test_prompt_is_not_judged(compat_service: Service) -> None:
    """The prompt holds a boxed answer; only the response part of ``query`` is scored."""
    prompt = "Example: \\boxed{42}. Now: 6*7?\n"
    out, _ = openrlhf_remote_rm_fn(url(compat_service), [prompt + "I think 40"], [prompt], ["42"])
    assert out["rewards"] == [0.0]


def test_code_reward_type_by_header(compat_service: Service) -> None:
    tests = json.dumps({"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]})
    resp_ok = "```python\nprint(int(input()) * 2)\n```"
    resp_bad = "```python\nprint(int(input()) + 2)\n```"
    out, _ = openrlhf_remote_rm_fn(
        url(compat_service),
        ["P" + resp_ok, "P" + resp_bad],
        ["P", "P"],
        [tests, tests],
        headers={"X-DistRS-Reward-Type": "python"},
    )
    assert out["rewards"] == [1.0, 0.5]  # the wrong program passes the "2 -> 4" case only


def test_mismatched_lengths_and_unknown_type_are_422(compat_service: Service) -> None:
    r = requests.post(url(compat_service), json={"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "prompts"
    r = requests.post(url(compat_service), json={"prompts": ["a"]})
    assert r.status_code == 422 and "query" in r.json()["error"]["message"]
    r = requests.post(url(compat_service), json={"query": ["a"]}, headers={"X-DistRS-Reward-Type": "nope"})
    assert r.status_code == 422
    assert requests.post(url(compat_service), json={"query": []}).json() == {
        "rewards": [],
        "scores": [],
        "extra_logs": {},
    }


def test_retried_call_with_a_batch_header_never_runs_twice(compat_service: Service) -> None:
    headers = {"X-DistRS-Batch": "orlhf-step-9", "X-DistRS-Task": "orlhf"}
    body = ([PROMPT + "\\boxed{42}"] * 3, [PROMPT] * 3, ["42"] * 3)
    first, _ = openrlhf_remote_rm_fn(url(compat_service), *body, headers=headers)
    again, _ = openrlhf_remote_rm_fn(url(compat_service), *body, headers=headers)
    assert first["rewards"] == again["rewards"] == [1.0] * 3
    with compat_service.client() as c:
        page = c.get("/v1/batches/orlhf/orlhf-step-9/results").json()
        assert page["done"] == 3
        assert all(c.get(f"/v1/requests/orlhf/orlhf-step-9-{i}").json()["attempts"] == 1 for i in range(3))


def test_unauthenticated_call_is_rejected_and_retried_like_any_error(compat_service: Service) -> None:
    calls = []
    real_post = requests.post

    def counting_post(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real_post(*a, **k)

    requests.post = counting_post  # type: ignore[assignment]
    try:
        try:
            openrlhf_remote_rm_fn(f"{compat_service.url}/get_reward", ["q"], ["q"], ["1"], try_max_times=3)
            raise AssertionError("expected the wrapper to give up")
        except RuntimeError:
            pass
    finally:
        requests.post = real_post  # type: ignore[assignment]
    assert len(calls) == 3


def test_one_call_per_finished_rollout_concurrently(compat_service: Service) -> None:
    """OpenRLHF 0.11 posts each rollout on its own as it finishes, many at once."""
    from concurrent.futures import ThreadPoolExecutor

    answers = [str(i) for i in range(12)]

    def one(i: int) -> float:
        out, _ = openrlhf_remote_rm_fn(
            url(compat_service), [PROMPT + f"\\boxed{{{i if i % 3 else i + 1}}}"], [PROMPT], [answers[i]]
        )
        assert len(out["rewards"]) == 1 and len(out["extra_logs"]["distrs_ok"]) == 1
        return float(out["rewards"][0])

    with ThreadPoolExecutor(12) as pool:
        rewards = list(pool.map(one, range(12)))
    assert rewards == [0.0 if i % 3 == 0 else 1.0 for i in range(12)]
