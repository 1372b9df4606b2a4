"""Two example reward functions. Each takes the request's payload (a dict, as the trainer sent
it) and returns a score, a bool, or ``{"score", "status"?, "detail"?}``. They run in the DistRS
sandbox with the stage's deadline; raising ends the request ``internal_error``."""

from __future__ import annotations

from typing import Any


def _normalize(text: str) -> str:
    return " ".join(text.strip().lower().split())


def exact_match(payload: dict[str, Any]) -> dict[str, Any]:
    """1 when the completion equals the ground truth up to case and whitespace."""
    completion = payload.get("completion")
    truth = payload.get("ground_truth")
    if not isinstance(completion, str) or not isinstance(truth, str):
        return {
            "score": 0.0,
            "status": "invalid",
            "detail": {"error": "completion and ground_truth must be strings"},
        }
    ok = _normalize(completion) == _normalize(truth)
    return {"score": 1.0 if ok else 0.0, "detail": {"normalized": _normalize(completion)[:200]}}


def keywords(payload: dict[str, Any]) -> float:
    """The fraction of ``keywords`` that occur in the completion (case-insensitive)."""
    words = [str(w).lower() for w in payload["keywords"]]
    text = str(payload["completion"]).lower()
    return sum(w in text for w in words) / len(words)
