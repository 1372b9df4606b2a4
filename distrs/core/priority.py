"""Queue ordering: Earliest Batch First (DistRS Sec. 5.2) or FCFS for comparison.

A queue entry's key is a tuple compared lexicographically. Under EBF the key is the estimated
completion T of the request's batch, then the request's arrival order (FCFS within a batch);
under FCFS it is the arrival order alone.
"""

from __future__ import annotations

from enum import StrEnum


class QueuePolicy(StrEnum):
    EBF = "ebf"
    FCFS = "fcfs"


def sort_key(policy: QueuePolicy, batch_estimated_completion: float, seq: int) -> tuple[float, int]:
    """Full ordering key: (primary score, arrival sequence)."""
    primary = batch_estimated_completion if policy is QueuePolicy.EBF else 0.0
    return (primary, seq)
