"""How many requests a worker leases at once (a lease bundle), shared by the live worker and the
cluster simulator so that both amortise the lease/completion hand-off the same way.

A bundle of k requests costs one lease, one heartbeat and one completion round trip instead of k
of each, but its requests run one after another on one worker, so the last of them reports later
than it would alone. The bundle therefore holds as many requests as run in about ``target_s``:
short rewards (a math check, a unit test) go many at a time; a long stage goes one at a time.
"""

from __future__ import annotations


def bundle_size(mean_run_s: float | None, target_s: float, max_k: int) -> int:
    """How many requests to lease in the next call: as many as run in about ``target_s`` by the
    measured mean run time, at least 1 and at most ``max_k``; 1 while nothing was measured yet
    (a stage of unknown length must not be hoarded)."""
    if max_k <= 1 or mean_run_s is None:
        return 1
    if mean_run_s <= 0:
        return max_k
    return max(1, min(max_k, int(target_s / mean_run_s)))
