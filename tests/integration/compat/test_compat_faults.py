"""Faults are never a score on the compatibility routes: a request that ends ``internal_error``
(here a reward plugin that raises, the service's fault and never the model's) is run again
``compat_fault_retries`` times, and what the framework gets after that says "fault" in the way
it can take it: per-row flags for OpenRLHF, a 503 that slime's ``remote_rm`` retries and raises.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest
import requests

from tests.fixtures.service import TRAINER_A, Service, running_service
from tests.integration.compat.framework_clients import slime_remote_rm
from tests.integration.rewards.plugin_fixtures import EXAMPLE, install


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = install(tmp_path_factory.mktemp("plugins"))
    path = os.pathsep.join([str(root), str(EXAMPLE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    pipelines = {"reward_types": {"boom": {"plugin": "bad_plugins:boom"}}}
    with running_service(workers={"verify": 1}, pipelines=pipelines, env={"PYTHONPATH": path}) as s:
        yield s


def attempts_of(svc: Service, task: str, batch_prefix: str) -> list[str]:
    """The batches a call ran for its rows: the first and each fault retry (``-f1``, ``-f2``)."""
    with svc.client() as c:
        return [
            b
            for b in (batch_prefix, f"{batch_prefix}-f1", f"{batch_prefix}-f2", f"{batch_prefix}-f3")
            if c.get(f"/v1/batches/{task}/{b}/results").status_code == 200
        ]


def test_openrlhf_fault_is_retried_then_flagged_per_row(svc: Service) -> None:
    """OpenRLHF has no way to drop one sample, so the row keeps reward 0 with its
    ``distrs_internal_error`` flag (OpenRLHF logs extra_logs per sample) - after two more runs."""
    body = {"query": ["P: x"], "prompts": ["P: "], "labels": ["1"]}
    r = requests.post(
        f"{svc.url}/get_reward?token={TRAINER_A}",
        json=body,
        headers={"X-DistRS-Reward-Type": "boom", "X-DistRS-Batch": "orl-fault"},
        timeout=60,
    )
    assert r.status_code == 200
    out = r.json()
    assert out["extra_logs"]["distrs_internal_error"] == [1.0] and out["extra_logs"]["distrs_ok"] == [0.0]
    assert attempts_of(svc, "openrlhf", "orl-fault") == ["orl-fault", "orl-fault-f1", "orl-fault-f2"]
    # a retry of the same call reattaches to the runs already made: bounded, nothing runs again
    again = requests.post(
        f"{svc.url}/get_reward?token={TRAINER_A}",
        json=body,
        headers={"X-DistRS-Reward-Type": "boom", "X-DistRS-Batch": "orl-fault"},
        timeout=60,
    ).json()
    assert again == out


def test_slime_fault_is_a_503_its_client_retries_then_raises(svc: Service) -> None:
    import aiohttp

    url = f"{svc.url}/slime/reward?token={TRAINER_A}&reward_type=boom&reward_key=score"
    r = requests.post(url, json={"prompt": "p", "response": "r", "label": "1"}, timeout=60)
    assert r.status_code == 503 and r.json()["error"]["code"] == "reward_fault"
    assert "internal_error after 3 attempts" in r.json()["error"]["message"]
    sample = {"prompt": "p", "response": "r2", "label": "1"}
    with pytest.raises(aiohttp.ClientResponseError) as e:
        asyncio.run(slime_remote_rm(url, sample, max_retries=3))
    assert e.value.status == 503  # slime's remote_rm raises: the sample never gets a 0
