"""What a finished batch teaches: its profile for history and its extra delay d.

Shared by every store so memory and Redis agree. T is computed from the requests' measured
arrival r_i and stage run times s_ij (Eq. 1-2); d = actual completion − T (Sec. 4, Table 1).
Run time at a stage that ended in a timeout is the time it ran (the stage timeout).
"""

from __future__ import annotations

from collections.abc import Sequence

from distrs.core.history import BatchProfile, RequestProfile
from distrs.core.model import BatchInfo, RequestRecord


def request_profile(batch: BatchInfo, rec: RequestRecord) -> RequestProfile:
    s: dict[str, float] = {}
    for st in rec.stages:
        s[st.name] = s.get(st.name, 0.0) + st.run_s
    status = rec.result.status.value if rec.result else "unknown"
    return RequestProfile(r=rec.arrived_at - batch.anchor, s=s, status=status)


def batch_profile(batch: BatchInfo, records: Sequence[RequestRecord]) -> BatchProfile:
    return BatchProfile(
        task=batch.task,
        batch_id=batch.batch_id,
        anchor=batch.anchor,
        requests=tuple(request_profile(batch, r) for r in records),
        reward_type=batch.reward_type,
    )


def finish_batch(batch: BatchInfo, records: Sequence[RequestRecord], now: float) -> BatchProfile:
    """Mark ``batch`` complete at ``now`` (in place) and return its profile."""
    profile = batch_profile(batch, records)
    earliest = batch.anchor + profile.earliest_completion() if records else now
    batch.completed_at = now
    batch.earliest_completion = earliest
    batch.extra_delay_s = max(0.0, now - earliest)
    return profile
