"""slime's remote reward protocol on ``POST /slime/reward``: through a reproduction of slime's
``remote_rm`` (always) and through slime's own ``rm_hub`` module where a slime checkout is given
(``DISTRS_SLIME_SOURCE``; slime is not on PyPI)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import requests

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_clients import slime_remote_rm
from tests.integration.compat.framework_sources import SlimeSample, slime_rm_hub

PROMPT = "Example: 2+2 = \\boxed{4}. Now: what is 6*7?"


def url(svc: Service, **query: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in {"token": TRAINER_A, **query}.items())
    return f"{svc.url}/slime/reward?{q}"


def rm(svc: Service, response: str, label: Any, **query: str) -> Any:
    return asyncio.run(
        slime_remote_rm(url(svc, **query), {"prompt": PROMPT, "response": response, "label": label})
    )


def test_bare_score_without_reward_key(compat_service: Service) -> None:
    """Without --reward-key slime uses the reply itself as the reward: a bare number."""
    assert rm(compat_service, "6*7 = \\boxed{42}", "42") == 1.0
    assert rm(compat_service, "I think 40", "42") == 0.0  # the prompt's \\boxed{4} is never graded


def test_reward_under_the_configured_key(compat_service: Service) -> None:
    reply = rm(compat_service, "\\boxed{42}", "42", reward_key="score")
    assert reply["score"] == 1.0 and reply["status"] == "ok"
    reply = rm(compat_service, "\\boxed{41}", "42", reward_key="acc")
    assert reply["acc"] == 0.0 and reply["status"] == "wrong_answer"


def test_code_reward_type_and_chat_prompt(compat_service: Service) -> None:
    tests = json.dumps({"inputs": ["2\n"], "outputs": ["4\n"]})
    body = {
        "prompt": [{"role": "user", "content": "double it"}],
        "response": "```python\nprint(int(input()) * 2)\n```",
        "label": tests,
    }
    got = asyncio.run(slime_remote_rm(url(compat_service, reward_type="python"), body))
    assert got == 1.0


def test_bad_input_is_a_422_naming_the_field(compat_service: Service) -> None:
    r = requests.post(
        url(compat_service, reward_type="nope"), json={"response": "x", "label": "1"}, timeout=30
    )
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "reward_type"
    assert "math" in r.json()["error"]["message"]
    r = requests.post(url(compat_service), json={"prompt": "p", "label": "1"}, timeout=30)
    assert r.status_code == 422 and "response" in r.json()["error"]["message"]
    r = requests.post(url(compat_service, reward_key="a b"), json={"response": "x", "label": "1"}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "reward_key"
    with pytest.raises(aiohttp.ClientResponseError):
        asyncio.run(
            slime_remote_rm(
                f"{compat_service.url}/slime/reward", {"prompt": "", "response": "x", "label": "1"}
            )
        )


def test_retry_reattaches_to_the_first_batch(compat_service: Service) -> None:
    from distrs.proxy.routes.slime import SlimeSample, content_batch_id

    body = {"prompt": PROMPT, "response": "\\boxed{42}", "label": "42"}
    assert requests.post(url(compat_service, task="slime-retry"), json=body, timeout=30).json() == 1.0
    assert requests.post(url(compat_service, task="slime-retry"), json=body, timeout=30).json() == 1.0
    batch = content_batch_id("math", SlimeSample.model_validate(body))
    with compat_service.client() as c:
        page = c.get(f"/v1/batches/slime-retry/{batch}/results").json()
        assert page["done"] == 1
        assert c.get(f"/v1/requests/slime-retry/{batch}-0").json()["attempts"] == 1


def test_slimes_own_remote_rm_against_the_service(compat_service: Service) -> None:
    """slime's real ``async_rm``/``remote_rm`` (from a slime checkout: ``framework_sources.
    slime_rm_hub``) with ``--rm-type remote_rm --rm-url URL``; slime then reads ``reward[K]``."""
    from distrs.proxy.routes.slime import SLIME_WAIT_S

    hub = slime_rm_hub()
    keyed = SimpleNamespace(
        rm_type="remote_rm", rm_url=url(compat_service, reward_key="score"), custom_rm_path=None
    )
    bare = SimpleNamespace(rm_type="remote_rm", rm_url=url(compat_service), custom_rm_path=None)
    chat = [{"role": "user", "content": PROMPT}]

    async def go() -> tuple[Any, list[Any], Exception | None, float]:
        try:
            one = await hub.async_rm(
                keyed, SlimeSample(prompt=PROMPT, response="6*7 = \\boxed{42}", label="42")
            )
            many = await hub.batched_async_rm(
                bare,
                [
                    SlimeSample(prompt=chat, response="\\boxed{42}", label="42"),
                    SlimeSample(
                        prompt=PROMPT, response="I think 40", label="42"
                    ),  # the prompt's box is not graded
                ],
            )
            refused = None
            try:  # a bad URL: slime's own raise_for_status (one attempt, not slime's 10 with backoff)
                await hub.remote_rm(
                    SimpleNamespace(rm_url=url(compat_service, reward_type="nope")),
                    SlimeSample(response="x", label="1"),
                    max_retries=1,
                )
            except aiohttp.ClientResponseError as e:
                refused = e
            assert hub._shared_session is not None
            return one, many, refused, hub._shared_session.timeout.total
        finally:
            if hub._shared_session is not None:
                await hub._shared_session.close()
                hub._shared_session = None

    one, many, refused, slime_timeout_s = asyncio.run(go())
    assert one["score"] == 1.0 and one["status"] == "ok"
    assert many == [1.0, 0.0]
    assert refused is not None and refused.status == 422
    # the route answers (504 at worst) before slime's own client gives up on the POST
    assert slime_timeout_s > SLIME_WAIT_S
