"""The TRL adapter, called by TRL 1.16.0's own ``GRPOTrainer._calculate_rewards`` (run from
the published wheel with numpy standing in for torch: ``trl_reward_loop.py``): ``prompts=``,
``completions=``, ``completion_ids=``, every other dataset column as a keyword list, plus
``trainer_state``, ``log_extra`` and ``log_metric``; a ``None`` in the returned list becomes NaN
("no reward"), the list must have one entry per row (TRL raises otherwise), and the rewards of
several functions are summed with ``reward_weights``, NaN left out."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest
from distrs_client import RewardClient
from distrs_client.adapters.trl import DistrsReward
from distrs_client.retry import RetryPolicy

from tests.fixtures.service import TRAINER_A, Service, free_port
from tests.integration.compat.trl_reward_loop import calculate_rewards, trl_functions, weighted_rewards


def trl_calls(reward: DistrsReward, rows: list[dict[str, Any]], step: int = 0) -> list[float]:
    """The rewards TRL's reward step gets from ``reward`` alone (NaN for ``None``)."""
    return [float(x) for x in calculate_rewards([reward], rows, step)[:, 0]]


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


def test_trl_itself_calls_it_as_a_sync_function_and_refuses_a_wrong_length() -> None:
    _, is_async_callable = trl_functions()
    assert not is_async_callable(DistrsReward("http://127.0.0.1:1"))  # TRL calls it in line, not on its loop

    def short(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [1.0]

    with pytest.raises(ValueError, match="returned 1 rewards, but 2 were expected"):
        calculate_rewards([short], rows(("a", "1", "math"), ("b", "1", "math")))


def test_reward_weights_leave_out_the_rows_it_cannot_score(compat_service: Service) -> None:
    """With another reward function beside it, a ``None`` row keeps the other function's reward
    (NaN is left out of TRL's weighted sum) instead of a 0 the completion did not earn."""

    def length_bonus(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        assert kwargs["ground_truth"] == ["2", "2", "2"] and kwargs["trainer_state"].global_step == 3
        return [0.5] * len(completions)

    with RewardClient(compat_service.url, TRAINER_A) as client:
        f = DistrsReward(task="trl-weights", client=client)
        per_func = calculate_rewards(
            [f, length_bonus],
            rows(
                ("\\boxed{2}", "2", "math"), ("\\boxed{3}", "2", "math"), ("\\boxed{2}", "2", "no-such-type")
            ),
            step=3,
        )
    assert per_func[:2, 0].tolist() == [1.0, 0.0] and math.isnan(per_func[2, 0])
    assert weighted_rewards(per_func, [2.0, 1.0]).tolist() == [2.5, 0.5, 0.5]


def test_a_row_no_function_can_score_is_logged_by_trl_not_raised(
    compat_service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with RewardClient(compat_service.url, TRAINER_A) as client, caplog.at_level(logging.WARNING):
        f = DistrsReward(task="trl-allnone", client=client)
        per_func = calculate_rewards([f], rows(("\\boxed{2}", "2", "nope")))
    assert np.isnan(per_func).all()
    assert "All reward functions returned None" in caplog.text and "'reward_type': 'nope'" in caplog.text
