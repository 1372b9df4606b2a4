"""What the framework adapters share: choosing a reward type and building payloads from
dataset fields (ground truth, test cases) in the shapes trainers' datasets commonly use."""

from __future__ import annotations

import json
from typing import Any

from distrs_client.extract import build_payload
from distrs_client.models import RewardResult

CODE_TYPES = ("cpp", "python", "cuda")


def reward_type_for(data_source: str | None, extra_info: dict[str, Any] | None, default: str) -> str:
    """``extra_info["reward_type"]`` if given, else a type named in ``data_source``, else ``default``."""
    if extra_info and isinstance(extra_info.get("reward_type"), str):
        return str(extra_info["reward_type"])
    src = (data_source or "").lower()
    for rt in ("cuda", "cpp", "python", "math"):
        if rt in src:
            return rt
    return default


_MALFORMED = object()


def parsed_ground_truth(ground_truth: Any) -> Any:
    """A ground truth as given, or decoded from JSON when it is text; :data:`_MALFORMED` for text
    that is not JSON."""
    if isinstance(ground_truth, (bytes, str)):
        try:
            return json.loads(ground_truth)
        except ValueError:
            return _MALFORMED
    return ground_truth


def cases_from(ground_truth: Any) -> list[dict[str, Any]]:
    """Test cases from a ground truth: a list of ``{stdin, expected_stdout}``, or the
    ``{"inputs": [...], "outputs": [...]}`` form (as a dict or JSON string) common in code datasets."""
    gt = parsed_ground_truth(ground_truth)
    if gt is _MALFORMED:
        return []
    if isinstance(gt, dict) and "inputs" in gt and "outputs" in gt:
        return [
            {"stdin": str(i), "expected_stdout": str(o)}
            for i, o in zip(gt["inputs"], gt["outputs"], strict=False)
        ]
    if isinstance(gt, list):
        return [t for t in gt if isinstance(t, dict) and "stdin" in t]
    return []


def call_based_fn(ground_truth: Any) -> str | None:
    """The ``fn_name`` of a call-based ground truth (``{"inputs", "outputs", "fn_name"}``, as
    verl's code datasets carry it), else None."""
    gt = parsed_ground_truth(ground_truth)
    name = gt.get("fn_name") if isinstance(gt, dict) else None
    return name if isinstance(name, str) and name else None


def payload_for(
    reward_type: str, completion: str, ground_truth: Any, extra: dict[str, Any] | None
) -> dict[str, Any]:
    options = dict((extra or {}).get("reward_options") or {})
    fn_name = call_based_fn(ground_truth) if reward_type == "python" else None
    if fn_name is not None:  # call-based: JSON arguments in, JSON return value compared
        options.setdefault("fn_name", fn_name)
    if reward_type in CODE_TYPES:
        return build_payload(reward_type, completion, tests=cases_from(ground_truth), **options)
    if reward_type == "math":
        return build_payload(
            reward_type, completion, ground_truth="" if ground_truth is None else str(ground_truth)
        )
    return build_payload(reward_type, completion, ground_truth=ground_truth, **options)


def score_or_none(result: RewardResult) -> float | None:
    """The score, or None when the service failed (``internal_error``): not the model's fault."""
    return None if result.status == "internal_error" else result.score
