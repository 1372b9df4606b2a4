"""Retry policy: exponential backoff with full jitter, honouring ``Retry-After``.

The delay before retry ``n`` (0-based) is drawn uniformly from ``[0, min(max_delay, initial *
multiplier**n)]`` ("full jitter"), which spreads a fleet of rollout workers that all saw the same
proxy restart instead of having them reconnect in lock-step. A ``Retry-After`` header from a 429 or
503 overrides the draw (capped at ``max_delay_retry_after``). Retries stop when the next sleep would
cross ``max_elapsed_s`` since the first attempt. The functions are pure: the random draw and the
clock are passed in.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass

#: HTTP statuses worth another attempt: rate limiting and server-side failures.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How hard the client tries before surfacing an error.

    The defaults ride out a proxy restart of up to about a minute.
    """

    initial_delay_s: float = 0.05
    multiplier: float = 2.0
    max_delay_s: float = 2.0
    max_elapsed_s: float = 60.0
    max_delay_retry_after_s: float = 30.0

    def backoff(self, attempt: int, draw: float) -> float:
        """Full-jitter delay before retry ``attempt`` (0-based); ``draw`` is uniform in [0, 1)."""
        ceiling = min(self.max_delay_s, self.initial_delay_s * self.multiplier ** min(attempt, 64))
        return ceiling * draw

    def delay(self, attempt: int, draw: float, retry_after_s: float | None) -> float:
        """The sleep before the next attempt, preferring the server's ``Retry-After``."""
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, self.max_delay_retry_after_s)
        return self.backoff(attempt, draw)

    def should_retry(self, elapsed_s: float, next_delay_s: float) -> bool:
        """Whether sleeping ``next_delay_s`` more stays within the budget."""
        return elapsed_s + next_delay_s <= self.max_elapsed_s


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_epoch)
