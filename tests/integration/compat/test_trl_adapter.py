"""The TRL adapter, called the way TRL 1.16's ``GRPOTrainer._calculate_rewards`` calls a
synchronous reward function: ``prompts=``, ``completions=``, ``completion_ids=``, every other
dataset column as a keyword list, plus ``trainer_state``, ``log_extra`` and ``log_metric``; a
``None`` in the returned list becomes NaN ("no reward") and the list must have one entry per row."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from distrs_client import RewardClient
from distrs_client.adapters.trl import DistrsReward
from distrs_client.retry import RetryPolicy

from tests.fixtures.service import TRAINER_A, Service, free_port


def trl_calls(reward: DistrsReward, rows: list[dict[str, Any]], step: int = 0) -> list[float]:
    """TRL's own steps around a sync reward function (trl/trainer/grpo_trainer.py, 1.16.0)."""
    prompts = [r["prompt"] for r in rows]
    completions = [r["completion"] for r in rows]
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs: dict[str, Any] = {k: [r[k] for r in rows] for k in keys}
    kwargs["trainer_state"] = SimpleNamespace(global_step=step)
    kwargs["log_extra"] = lambda *a, **k: None
    kwargs["log_metric"] = lambda *a, **k: None
    out = reward(prompts=prompts, completions=completions, completion_ids=[[1]] * len(rows), **kwargs)
    out = [r if r is not None else math.nan for r in out]
    assert len(out) == len(prompts)  # TRL raises otherwise
    return [float(x) for x in out]


def rows(*triples: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [
        {
            "prompt": "1+1?",
            "completion": [{"role": "assistant", "content": c}],
            "ground_truth": gt,
            "reward_type": rt,
        }
        for c, gt, rt in triples
    ]


def same(a: list[float], b: list[float]) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def test_scores_and_none_for_rows_it_cannot_score(compat_service: Service) -> None:
    with RewardClient(compat_service.url, TRAINER_A) as client:
        f = DistrsReward(task="trl-rows", client=client)
        got = trl_calls(
            f,
            rows(
                ("\\boxed{2}", "2", "math"),
                ("\\boxed{2}", "2", "no-such-type"),  # unknown type: never sent
                ("\\boxed{3}", "2", "math"),
                ("\\boxed{2}", "", "math"),  # empty ground truth: the service says invalid
                ("x" * (1 << 20) + "\\boxed{2}", "2", "math"),  # over the payload limit: refused (413)
            ),
            step=7,
        )
    assert same(got, [1.0, math.nan, 0.0, math.nan, math.nan])
    with compat_service.client() as c:
        page = c.get(f"/v1/batches/trl-rows/{f._run}-0-step7/results").json()
    assert page["size"] == 4 and page["done"] == 3  # the unknown row never joined; the 413 one was refused


def test_a_batch_of_only_unknown_types_sends_nothing_and_does_not_raise(compat_service: Service) -> None:
    with RewardClient(compat_service.url, TRAINER_A) as client:
        f = DistrsReward(task="trl-unknown", client=client)
        got = trl_calls(f, rows(("\\boxed{2}", "2", "nope"), ("\\boxed{2}", "2", "nope")))
    assert all(math.isnan(x) for x in got)
    with compat_service.client() as c:
        assert c.get(f"/v1/batches/trl-unknown/{f._run}-0-step0/results").status_code == 404


def test_unreachable_service_gives_no_reward_instead_of_raising() -> None:
    retry = RetryPolicy(max_elapsed_s=0.5)
    with RewardClient(f"http://127.0.0.1:{free_port()}", TRAINER_A, retry=retry) as client:
        f = DistrsReward(task="trl-down", client=client, timeout=2)
        got = trl_calls(f, rows(("\\boxed{2}", "2", "math")))
    assert math.isnan(got[0])


def test_reward_types_endpoint(compat_service: Service) -> None:
    with compat_service.client() as c:
        body = c.get("/v1/reward-types").json()
    assert {"math", "python", "cpp"} <= set(body["reward_types"])
    assert body["reward_types"]["cpp"]["stages"] == ["compile", "run"]
