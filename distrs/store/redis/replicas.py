"""Sentinel mode: acknowledged transitions wait for a replica (``WAIT``) before their caller is
told they succeeded, so the replica the Sentinels promote after a failover has every one of them.

WAIT counts the replicas that have received everything written so far *on the connection that
sends it*. The script coalescer (coalesce.py) therefore sends ``WAIT replicas timeout`` last in the
very pipeline that carries the scripts of one event-loop tick: one WAIT covers every script before
it, and a tick without an acknowledged transition (only leases, heartbeats) sends none.

A primary without its replica (the replica failed, or it is the promoted replica whose old
primary is gone) would make every acknowledged write wait the whole timeout. After one WAIT that
came back short, writes skip it for ``SHORT_OF_REPLICAS_S`` (as durable as that primary's AOF
meanwhile, with a warning), then try again: the same rule as cluster mode (topology/cluster.py).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# How long acknowledged writes skip WAIT after one found too few replicas.
SHORT_OF_REPLICAS_S = 5.0


class ReplicaWait:
    """When to send WAIT, and what a short answer means (module docstring). Times are the
    event loop's clock, passed in."""

    def __init__(self, replicas: int, timeout_ms: int) -> None:
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self._skip_until = float("-inf")

    def command(self, now: float) -> tuple[str, int, int] | None:
        """The WAIT to append to a pipeline with acknowledged scripts, or None (do not wait)."""
        if self.replicas <= 0 or now < self._skip_until:
            return None
        return ("WAIT", self.replicas, self.timeout_ms)

    def answered(self, acked: object, now: float) -> None:
        """WAIT's reply: fewer replicas than wanted starts a while without waiting."""
        if isinstance(acked, int) and acked < self.replicas:
            self._skip_until = now + SHORT_OF_REPLICAS_S
            log.warning(
                "only %s of %s replicas acknowledged a write within %s ms; not waiting for them "
                "for %s s",
                acked, self.replicas, self.timeout_ms, SHORT_OF_REPLICAS_S,
            )  # fmt: skip
