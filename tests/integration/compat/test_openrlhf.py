"""OpenRLHF ``POST /get_reward``, called by OpenRLHF 0.11's own HTTP reward client
(``SingleTurnAgentExecutor._fetch_rewards_via_http`` from the published wheel)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import requests

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_sources import openrlhf_agent

PROMPT = "What is 6 * 7? Put the answer in \\boxed{}.\n"


@pytest.fixture(scope="module")
def agent() -> Any:
    return openrlhf_agent()


def url(svc: Service) -> str:
    return f"{svc.url}/get_reward?token={TRAINER_A}"


def fetch(agent: Any, url: str, queries: list[str], prompts: list[str], labels: list[Any]) -> dict[str, Any]:
    """One reward call as an OpenRLHF rollout makes it; the reply for its (single) shard."""
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=url)
    (reply,) = asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels))
    assert isinstance(reply, dict)
    return reply


def test_math_rewards_in_query_order(compat_service: Service, agent: Any) -> None:
    responses = ["It is \\boxed{42}.", "It is \\boxed{41}.", "6*7 = \\boxed{42}", "no idea"]
    out = fetch(agent, url(compat_service), [PROMPT + r for r in responses], [PROMPT] * 4, ["42"] * 4)
    assert out["rewards"] == [1.0, 0.0, 1.0, 0.0]
    assert out["scores"] == out["rewards"]
    logs = out["extra_logs"]
    assert all(len(v) == 4 for v in logs.values())  # per-sample, as OpenRLHF logs them
    assert logs["distrs_internal_error"] == [0.0] * 4


def test_prompt_is_not_judged(compat_service: Service, agent: Any) -> None:
    """The prompt holds a boxed answer; only the response part of ``query`` is scored."""
    prompt = "Example: \\boxed{42}. Now: 6*7?\n"
    out = fetch(agent, url(compat_service), [prompt + "I think 40"], [prompt], ["42"])
    assert out["rewards"] == [0.0]


def test_left_truncated_prompt_is_still_split(compat_service: Service, agent: Any) -> None:
    """OpenRLHF keeps the prompt's last tokens when it is too long: the query starts mid-prompt."""
    prompt = "Worked example: 6*7 = \\boxed{42}.\nNow your turn. What is 6 * 7?\n"
    kept = prompt[20:]
    out = fetch(
        agent, url(compat_service), [kept + "I think 40", kept + "\\boxed{42}"], [prompt] * 2, ["42"] * 2
    )
    assert out["rewards"] == [0.0, 1.0]


@pytest.mark.parametrize(
    "lead", ["<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<|im_start|>system\nBe brief.<|im_end|>\n"]
)
def test_query_with_special_tokens_before_the_prompt(compat_service: Service, agent: Any, lead: str) -> None:
    """OpenRLHF decodes the query with skip_special_tokens=False: a BOS token (or a template's
    header) comes before the prompt. The prompt is found after it and only the rest is graded."""
    prompt = "Example: \\boxed{42}. Now: 6*7?\n"
    queries = [lead + prompt + "I think 40", lead + prompt + "\\boxed{42}"]
    out = fetch(agent, url(compat_service), queries, [prompt] * 2, ["42"] * 2)
    assert out["rewards"] == [0.0, 1.0]
    assert out["extra_logs"]["distrs_prompt_not_found"] == [0.0, 0.0]


def test_left_cut_prompt_after_a_bos_token(compat_service: Service, agent: Any) -> None:
    prompt = "Worked example: 6*7 = \\boxed{42}.\nNow your turn. What is 6 * 7?\n"
    kept = "<|begin_of_text|>" + prompt[20:]
    out = fetch(
        agent, url(compat_service), [kept + "I think 40", kept + "\\boxed{42}"], [prompt] * 2, ["42"] * 2
    )
    assert out["rewards"] == [0.0, 1.0]


def test_a_row_whose_prompt_is_not_found_gets_0_and_a_flag_not_a_failed_call(
    compat_service: Service, agent: Any
) -> None:
    """Grading the whole query would grade the prompt; failing the call would make OpenRLHF retry
    five times and lose the rollout. The row gets 0 with extra_logs saying why; the others are scored."""
    prompt = "Example: \\boxed{42}. Now: 6*7?\n"
    queries = ["totally different text \\boxed{42}", prompt + "\\boxed{42}"]
    out = fetch(agent, url(compat_service), queries, [prompt] * 2, ["42"] * 2)
    assert out["rewards"] == [0.0, 1.0]
    assert out["extra_logs"]["distrs_prompt_not_found"] == [1.0, 0.0]
    assert out["extra_logs"]["distrs_ok"] == [0.0, 1.0]
    r = requests.post(url(compat_service), json={"query": ["\\boxed{42}"], "labels": ["42"]}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "prompts"


def test_code_reward_type_by_header(compat_service: Service) -> None:
    # OpenRLHF's client sets no headers; a wrapper or proxy may (and tests may) set this one.
    tests = json.dumps({"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]})
    resp_ok = "```python\nprint(int(input()) * 2)\n```"
    resp_bad = "```python\nprint(int(input()) + 2)\n```"
    r = requests.post(
        url(compat_service),
        json={"query": ["P" + resp_ok, "P" + resp_bad], "prompts": ["P", "P"], "labels": [tests, tests]},
        headers={"X-DistRS-Reward-Type": "python"},
        timeout=60,
    )
    assert r.json()["rewards"] == [1.0, 0.5]  # the wrong program passes the "2 -> 4" case only


def test_mismatched_lengths_and_unknown_type_are_422(compat_service: Service) -> None:
    u = url(compat_service)
    r = requests.post(u, json={"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "prompts"
    r = requests.post(u, json={"prompts": ["a"]}, timeout=30)
    assert r.status_code == 422 and "query" in r.json()["error"]["message"]
    r = requests.post(u, json={"query": ["a"], "prompts": [""]}, headers={"X-DistRS-Reward-Type": "nope"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "X-DistRS-Reward-Type"
    assert "math" in r.json()["error"]["message"]  # lists the known types
    assert requests.post(u, json={"query": [], "prompts": []}, timeout=30).json() == {
        "rewards": [],
        "scores": [],
        "extra_logs": {},
    }


def test_retried_call_never_runs_twice(compat_service: Service) -> None:
    """A retry carries the same body; without any header it reattaches to the first batch."""
    body = {"query": [PROMPT + "\\boxed{42}"] * 3, "prompts": [PROMPT] * 3, "labels": ["42", "42", "43"]}
    first = requests.post(url(compat_service), json=body, timeout=60).json()
    again = requests.post(url(compat_service), json=body, timeout=60).json()
    assert first["rewards"] == again["rewards"] == [1.0, 1.0, 0.0]
    from distrs.proxy.routes.openrlhf import GetRewardRequest, _content_id

    batch = "gr-" + _content_id("math", GetRewardRequest.model_validate(body))
    with compat_service.client() as c:
        page = c.get(f"/v1/batches/openrlhf/{batch}/results").json()  # tenant-a's own task
        assert page["done"] == 3  # one batch of three, not two
    headers = {"X-DistRS-Batch": "orlhf-step-9", "X-DistRS-Task": "orlhf"}
    requests.post(url(compat_service), json=body, headers=headers, timeout=60)
    requests.post(url(compat_service), json=body, headers=headers, timeout=60)
    with compat_service.client() as c:
        page = c.get("/v1/batches/orlhf/orlhf-step-9/results").json()
        assert page["done"] == 3
        assert all(c.get(f"/v1/requests/orlhf/orlhf-step-9-{i}").json()["attempts"] == 1 for i in range(3))


def test_server_answers_before_the_client_gives_up() -> None:
    """The route's default wait stays under OpenRLHF's own 180 s request timeout."""
    from distrs.proxy.routes import openrlhf

    src = openrlhf_agent_source()
    assert "ClientTimeout(total=180)" in src
    assert openrlhf.OPENRLHF_WAIT_S < openrlhf.OPENRLHF_CLIENT_TIMEOUT_S == 180


def openrlhf_agent_source() -> str:
    from tests.integration.compat.framework_sources import OPENRLHF, source

    return source(*OPENRLHF, "openrlhf/utils/agent.py").read_text()


def test_unauthenticated_call_fails_after_the_clients_retries(compat_service: Service, agent: Any) -> None:
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=f"{compat_service.url}/get_reward")
    with pytest.raises(RuntimeError, match="5 times"):
        asyncio.run(executor._fetch_rewards_via_http(["q"], ["q"], ["1"]))


def test_one_call_per_finished_rollout_concurrently(compat_service: Service, agent: Any) -> None:
    """OpenRLHF 0.11 posts each rollout on its own as it finishes, many at once."""
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=url(compat_service))

    async def all_rollouts() -> list[Any]:
        return await asyncio.gather(
            *(
                executor._fetch_rewards_via_http(
                    [PROMPT + f"\\boxed{{{i if i % 3 else i + 1}}}"], [PROMPT], [str(i)]
                )
                for i in range(12)
            )
        )

    replies = asyncio.run(all_rollouts())
    rewards = []
    for (reply,) in replies:
        assert len(reply["rewards"]) == 1 and len(reply["extra_logs"]["distrs_ok"]) == 1
        rewards.append(reply["rewards"][0])
    assert rewards == [0.0 if i % 3 == 0 else 1.0 for i in range(12)]
