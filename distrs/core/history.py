"""Per-task history of finished batches and the estimates drawn from it.

A finished batch is kept as a *profile*: for each request its rollout completion time r_i
relative to the batch's anchor (rollout start, or first arrival when no hint was given) and its
running time s_ij at each stage. The scaling policy replays profiles (Alg. 1-2); the EBF queue
uses the estimated batch completion T = max_i(r_i + Σ_j s_ij) (Eq. 1-2).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar


@dataclass(frozen=True)
class RequestProfile:
    """One finished request: arrival offset r (seconds after the batch anchor) and s_j per stage."""

    r: float
    s: dict[str, float]
    status: str = "ok"

    def earliest_completion(self) -> float:
        """t_i = r_i + Σ_j s_ij (Eq. 1), relative to the anchor."""
        return self.r + sum(self.s.values())


@dataclass(frozen=True)
class BatchProfile:
    """A finished batch of one task, relative to its anchor time."""

    task: str
    batch_id: str
    anchor: float
    requests: tuple[RequestProfile, ...] = field(default_factory=tuple)
    reward_type: str | None = None

    def earliest_completion(self) -> float:
        """T = max_i t_i (Eq. 2), relative to the anchor; 0 for an empty batch."""
        return max((q.earliest_completion() for q in self.requests), default=0.0)


FINISHED_SAMPLE = 256
"""A store's snapshot shows at most this many finished requests' s_j per active batch (what a
first batch learns its stage times from, ``distrs.scaling.fallback``)."""

T = TypeVar("T")


def finished_sample(items: Sequence[T]) -> list[T]:
    """At most FINISHED_SAMPLE of ``items``, evenly spaced (all of them when there are fewer)."""
    step = max(len(items) / FINISHED_SAMPLE, 1.0)
    return [items[int(j * step)] for j in range(min(len(items), FINISHED_SAMPLE))]


def estimate_completion(history: Sequence[BatchProfile], anchor: float, default_span_s: float) -> float:
    """Estimated absolute T of a new batch anchored at ``anchor``.

    The latest profile of the same task is shifted to the new anchor (adjacent iterations are
    alike, DistRS Sec. 3.1 / Fig. 5c). With no history, ``anchor + default_span_s``.
    """
    if not history:
        return anchor + default_span_s
    return anchor + history[-1].earliest_completion()


@dataclass(frozen=True)
class SpanSample:
    """The measured span T (Eq. 2, relative to its anchor) of a recently finished batch."""

    reward_type: str | None
    finished_at: float
    span_s: float


SPAN_SAMPLES = 256
"""Recent finished-batch spans a store keeps across all tasks (the prior of new tasks)."""

PRIOR_MAX_AGE_S = 3600.0
"""Spans older than this say little about the service's current load and are not used."""


def prior_span(
    samples: Iterable[SpanSample],
    reward_type: str | None,
    now: float,
    default_span_s: float,
    max_age_s: float = PRIOR_MAX_AGE_S,
) -> float:
    """The span a task with no history is assumed to take: the median span of the batches of
    its reward type that finished in the last ``max_age_s``; failing that, of any type (they
    share the stages' workers); failing that, ``default_span_s``.

    Without this a new task's first batch is estimated at ``default_span_s`` (minutes) and waits
    under EBF behind every busy tenant's batch although it is typically as short as theirs.
    The median keeps one outlier batch from setting the prior; the result never exceeds
    ``default_span_s``.
    """
    fresh = [s for s in samples if 0.0 <= now - s.finished_at <= max_age_s and s.span_s >= 0.0]
    same = [s.span_s for s in fresh if reward_type is not None and s.reward_type == reward_type]
    pool = same or [s.span_s for s in fresh]
    if not pool:
        return default_span_s
    return min(default_span_s, statistics.median(pool))


def pooled(profiles: Iterable[BatchProfile]) -> list[RequestProfile]:
    """All request profiles of several batches, for sampling (Alg. 2 lines 14 and 18)."""
    return [q for p in profiles for q in p.requests]
