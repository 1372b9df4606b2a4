"""Stages and the pipeline table that ties them to the reward types.

A reward *type* (``cuda``, ``cpp`` ..., ``core/reward_type.py``) is an ordered list of *stages*;
a stage is a worker pool with a resource class, a timeout threshold T_j and a per-worker cost C_j
(DistRS Eq. 5, Sec. 5.1). A type may bound its own requests at a stage by a timeout of its own
(``RewardType.timeouts``); :meth:`PipelineTable.timeout_s` answers for a (type, stage). The table
is plain data so the pure scaling code, the proxy and the chart all read the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from distrs.core.reward_type import RewardType


class ResourceClass(StrEnum):
    """What a stage's worker owns exclusively while it runs one request."""

    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class WorkerResources:
    """Kubernetes-style resource requests for one worker of a stage (used by the chart docs)."""

    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = 0


@dataclass(frozen=True)
class StageSpec:
    """One worker pool.

    ``timeout_s`` is T_j of the timeout-aware rule (DistRS Sec. 5.1): a request never runs longer
    at this stage. ``cost`` is C_j of Eq. 5: what one worker of this stage costs relative to others.
    """

    name: str
    resource: ResourceClass = ResourceClass.CPU
    timeout_s: float = 60.0
    cost: float = 1.0
    resources: WorkerResources = field(default_factory=WorkerResources)


@dataclass(frozen=True)
class PipelineTable:
    """All stages and reward types the service knows, validated to be consistent."""

    stages: dict[str, StageSpec]
    reward_types: dict[str, RewardType]

    def __post_init__(self) -> None:
        for rt in self.reward_types.values():  # a RewardType has stages, each once
            for s in rt.stages:
                if s not in self.stages:
                    raise ValueError(f"reward type {rt.name!r} names unknown stage {s!r}")

    def stage_names(self) -> list[str]:
        return list(self.stages)

    def first_stage(self, reward_type: str) -> str:
        return self.reward_types[reward_type].stages[0]

    def next_stage(self, reward_type: str, stage: str) -> str | None:
        """The stage after ``stage`` for this type, or None when ``stage`` is the last one."""
        order = self.reward_types[reward_type].stages
        i = order.index(stage)
        return order[i + 1] if i + 1 < len(order) else None

    def timeout_s(self, reward_type: str, stage: str) -> float:
        """T_j of ``stage`` for requests of ``reward_type``: the type's own, else the stage's."""
        own = self.reward_types[reward_type].timeouts.get(stage)
        return self.stages[stage].timeout_s if own is None else own

    def timeouts_from(self, reward_type: str, stage: str) -> float:
        """Σ_{j≥k} T_j for the remaining stages of a type (the LT term of DistRS Sec. 5.1)."""
        order = self.reward_types[reward_type].stages
        return sum(self.timeout_s(reward_type, s) for s in order[order.index(stage) :])
