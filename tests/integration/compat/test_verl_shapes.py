"""The verl adapter scores every ground-truth shape of verl's own SandboxFusion path the way verl
does: each row is scored twice against the live service - by verl 0.9.1's own
``verl.utils.reward_score.sandbox_fusion.compute_score`` (from the published wheel, calling
``POST /run_code`` per test case) and by ``distrs_client.adapters.verl.compute_score`` - and
both must give the expected score. The shapes are the ones verl's code reads: ``inputs``/
``outputs`` (stdin/stdout), ``fn_name`` (call-based), ``assert_case``, the malformed ones it
scores 0.0, and the data sources it scores over the first 10 cases only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from distrs_client.adapters import verl as adapter

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_sources import VERL, load_module, verl_sandbox_utils

DOUBLE = "```python\nprint(int(input()) * 2)\n```"
SQUARE = "```python\nn = int(input())\nprint(n * n)\n```"  # right for 2 only (2*2 == 2+2)
ADD = "```python\ndef add(a, b):\n    return a + b\n```"
ADD_WRONG = "```python\ndef add(a, b):\n    return a + b if a else 0\n```"
IO = {"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]}
TWELVE = {
    "inputs": [f"{i}\n" for i in range(12)],
    "outputs": [f"{2 * i}\n" for i in range(10)] + ["x\n", "y\n"],
}

# (case, data_source, completion, ground truth, expected score): verl 0.9.1's behaviour.
SHAPES: list[tuple[str, str, str, Any, float]] = [
    ("stdin all pass", "leetcode", DOUBLE, json.dumps(IO), 1.0),
    ("stdin half pass", "leetcode", SQUARE, json.dumps(IO), 0.5),
    ("stdin as a dict", "leetcode", DOUBLE, IO, 1.0),
    (
        "assert_case one of two",
        "mbpp",
        ADD_WRONG,
        json.dumps({"assert_case": ["assert add(1, 2) == 3", "assert add(0, 5) == 5"]}),
        0.5,
    ),
    (
        "assert_case all",
        "mbpp",
        ADD,
        {"assert_case": ["assert add(1, 2) == 3", "assert add(0, 5) == 5"]},
        1.0,
    ),
    (
        "assert_case none",
        "mbpp",
        "```python\ndef add(a, b):\n    return 0\n```",
        {"assert_case": ["assert add(1, 2) == 3"]},
        0.0,
    ),
    (
        "call-based fn_name",
        "leetcode",
        "```python\ndef total(xs):\n    return max(xs)\n```",
        {"inputs": ["[1, 2, 3]", "[5]"], "outputs": ["6", "5"], "fn_name": "total"},
        0.5,
    ),
    ("no code block", "leetcode", "print(int(input()) * 2)", json.dumps(IO), 0.0),
    ("ground truth not JSON", "leetcode", DOUBLE, "not json", 0.0),
    ("outputs missing", "leetcode", DOUBLE, {"inputs": ["2\n"]}, 0.0),
    ("count mismatch", "leetcode", DOUBLE, {"inputs": ["2\n", "3\n"], "outputs": ["4\n"]}, 0.0),
    ("codecontests: first 10 of 12", "codecontests", DOUBLE, TWELVE, 1.0),
    ("other source: all 12", "leetcode", DOUBLE, TWELVE, 10 / 12),
]


@pytest.fixture(scope="module")
def verl_sandbox_fusion() -> Any:
    verl_sandbox_utils()  # the package's utils module, which __init__ imports relatively
    return load_module(*VERL, "verl/utils/reward_score/sandbox_fusion/__init__.py")


@pytest.mark.parametrize(
    ("case", "source", "completion", "gt", "expected"), SHAPES, ids=[s[0] for s in SHAPES]
)
def test_adapter_scores_like_verls_own_sandbox_path(
    compat_service: Service,
    monkeypatch: pytest.MonkeyPatch,
    verl_sandbox_fusion: Any,
    case: str,
    source: str,
    completion: str,
    gt: Any,
    expected: float,
) -> None:
    url = f"{compat_service.url}/run_code?token={TRAINER_A}"
    continuous = source in ("codecontests", "apps", "codeforces", "taco")  # verl's default_compute_score
    theirs, _ = verl_sandbox_fusion.compute_score(
        url, None, 1024, completion, json.loads(json.dumps(gt)), continuous=continuous
    )
    assert theirs == pytest.approx(expected), f"verl's own path: {case}"
    monkeypatch.setenv("DISTRS_URL", compat_service.url)
    monkeypatch.setenv("DISTRS_TOKEN", TRAINER_A)
    ours = adapter.compute_score(source, completion, gt, None, reward_type="python", task="verl-shapes")
    assert ours == pytest.approx(expected), case
