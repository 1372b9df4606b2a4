"""``kernelbench`` payload validation (a 4xx-style ``invalid`` naming the field) and the reward
formulas (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from distrs.rewards.base import InvalidPayload
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.payload import parse_payload

REF = "class Model: ...\n"
CAND = "class ModelNew: ...\n"


def p(**kw: Any) -> dict[str, Any]:
    return {"original_model_src": REF, "custom_model_src": CAND, **kw}


def test_defaults_follow_kernelbench() -> None:
    k = parse_payload(p())
    assert (k.backend, k.precision, k.num_correct_trials, k.num_perf_trials) == ("cuda", "fp32", 5, 100)
    assert (k.atol, k.rtol) == (1e-4, 1e-4) and k.measure_performance and k.reward == "speedup"
    assert parse_payload(p(precision="bf16")).atol == 1e-2
    assert parse_payload(p(tolerance="v0.1")).atol == 1e-2
    assert parse_payload(p(atol=0.5)).atol == 0.5
    assert parse_payload(p(backend="cpp")).device == "cpu"


def test_completion_takes_the_last_python_block() -> None:
    k = parse_payload({"original_model_src": REF, "completion": f"x\n```python\n{CAND}```\n"})
    assert k.custom_model_src is not None and "ModelNew" in k.custom_model_src
    assert parse_payload({"original_model_src": REF, "completion": "no code"}).custom_model_src is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("not an object", "payload"),
        ({"custom_model_src": CAND}, "original_model_src"),
        ({"original_model_src": REF}, "custom_model_src"),
        (p(completion="x"), "custom_model_src"),
        (p(backend="rocm"), "backend"),
        (p(backend="triton"), "backend"),
        (p(precision="fp8"), "precision"),
        (p(num_correct_trials=0), "num_correct_trials"),
        (p(num_perf_trials=True), "num_perf_trials"),
        (p(num_perf_trials=10**6), "num_perf_trials"),
        (p(atol=float("nan")), "atol"),
        (p(rtol=-1), "rtol"),
        (p(tolerance="v0.2"), "tolerance"),
        (p(measure_performance="yes"), "measure_performance"),
        (p(reward="mine"), "reward"),
        (p(speedup_cap=0), "speedup_cap"),
        (p(custom_model_src="x" * 300_000), "custom_model_src"),
    ],
)
def test_bad_payloads_name_the_field(payload: Any, field: str) -> None:
    with pytest.raises(InvalidPayload) as e:
        parse_payload(payload)
    assert e.value.field == field


@pytest.mark.parametrize(
    ("name", "outcome", "value"),
    [
        ("speedup", Outcome(Stage.CORRECT, 2.5), 2.5),
        ("speedup", Outcome(Stage.CORRECT, 50.0), 10.0),
        ("speedup", Outcome(Stage.CORRECT), 1.0),
        ("speedup", Outcome(Stage.INCORRECT), 0.0),
        ("kevin", Outcome(Stage.CORRECT, 2.0), 2.3),
        ("kevin", Outcome(Stage.COMPILE_ERROR), 0.0),
        ("kernelgym", Outcome(Stage.REJECTED), -0.5),
        ("kernelgym", Outcome(Stage.FORMAT_ERROR), -0.5),
        ("kernelgym", Outcome(Stage.INCORRECT), -0.3),
        ("kernelgym", Outcome(Stage.CORRECT, 0.9), -0.1),
        ("kernelgym", Outcome(Stage.CORRECT, 1.0), 0.2),
        ("kernelgym", Outcome(Stage.CORRECT, 1.3), 0.4),
        ("kernelgym", Outcome(Stage.CORRECT, 1.5), 0.6),
        ("kernelgym", Outcome(Stage.CORRECT, 2.9), 0.8),
        ("kernelgym", Outcome(Stage.CORRECT, 3.0), 1.0),
    ],
)
def test_formulas(name: str, outcome: Outcome, value: float) -> None:
    assert score(name, outcome, 10.0) == pytest.approx(value)
