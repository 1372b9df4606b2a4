"""The Actuator protocol: how the planner sets worker replicas per stage.

Implementations: ``local`` (a process pool on this machine) and ``kubernetes`` (the Deployment
``/scale`` subresource). Both are driven by the same planner loop, so both are async and never
raise for a transient failure of the thing they drive: they record it, keep the last good view
and let the next decision try again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class StageReplicas:
    """What the actuator knows about one stage's workers."""

    desired: int = 0
    ready: int = 0
    # Worker ids that are busy (holding a lease) when the actuator can tell; used to scale down idle
    # workers first.
    busy: set[str] = field(default_factory=set)
    error: str | None = None


class Actuator(Protocol):
    async def set_replicas(self, stage: str, n: int) -> None:
        """Ask for ``n`` workers at ``stage``. Scale-down must never kill a busy worker."""
        ...

    async def observe(self) -> dict[str, StageReplicas]:
        """Current desired/ready replicas per stage."""
        ...

    async def close(self) -> None: ...


ActuatorFactory = Callable[..., Actuator]
