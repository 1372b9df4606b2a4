"""Execution plans: task groups, GPU groups, parallel strategies and tasklet-to-GPU maps.

A plan is the output of every scheduler here. It follows HetRL's multi-level search space
(§3.2): task groups (Level 1) each own a set of GPUs (Levels 2-3); every task in a group has a
parallel strategy (DP, PP, TP) (Level 4) whose tasklets l_{i,j,k} (replica i, stage j, shard k)
are mapped onto the group's GPUs (Level 5) by ``TaskPlacement.devices``, laid out as
``devices[i*pp*tp + j*tp + k]``. ``layers`` is the layer split across pipeline stages and
``samples`` the per-replica share of the batch (HetRL §4.2 load balancing); both may be left
empty for the cost model to fill in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

GEN = "actor_gen"
REWARD_INF = "reward_inf"
REF_INF = "ref_inf"
CRITIC_INF = "critic_inf"
ACTOR_TRAIN = "actor_train"
CRITIC_TRAIN = "critic_train"

ALL_TASKS = (GEN, REWARD_INF, REF_INF, CRITIC_INF, ACTOR_TRAIN, CRITIC_TRAIN)
TASK_MODEL = {
    GEN: "actor",
    REWARD_INF: "reward",
    REF_INF: "ref",
    CRITIC_INF: "critic",
    ACTOR_TRAIN: "actor",
    CRITIC_TRAIN: "critic",
}
TASK_KIND = {
    GEN: "gen",
    REWARD_INF: "inf",
    REF_INF: "inf",
    CRITIC_INF: "inf",
    ACTOR_TRAIN: "train",
    CRITIC_TRAIN: "train",
}


@dataclass(frozen=True)
class Strategy:
    dp: int
    pp: int
    tp: int

    @property
    def size(self) -> int:
        return self.dp * self.pp * self.tp


@dataclass(frozen=True)
class TaskPlacement:
    task: str
    strategy: Strategy
    devices: tuple[int, ...]
    layers: tuple[int, ...] = ()
    samples: tuple[int, ...] = ()

    def device(self, i: int, j: int, k: int) -> int:
        s = self.strategy
        return self.devices[i * s.pp * s.tp + j * s.tp + k]

    def stage_devices(self, i: int, j: int) -> list[int]:
        s = self.strategy
        base = i * s.pp * s.tp + j * s.tp
        return list(self.devices[base : base + s.tp])

    def replica_devices(self, i: int) -> list[int]:
        s = self.strategy
        return list(self.devices[i * s.pp * s.tp : (i + 1) * s.pp * s.tp])


@dataclass(frozen=True)
class TaskGroup:
    tasks: tuple[str, ...]
    devices: tuple[int, ...]
    placements: tuple[TaskPlacement, ...] = ()

    def placement(self, task: str) -> TaskPlacement:
        for p in self.placements:
            if p.task == task:
                return p
        raise KeyError(task)


@dataclass(frozen=True)
class Plan:
    groups: tuple[TaskGroup, ...]
    algorithm: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def group_of(self, task: str) -> TaskGroup:
        for g in self.groups:
            if task in g.tasks:
                return g
        raise KeyError(task)

    def placement(self, task: str) -> TaskPlacement:
        return self.group_of(task).placement(task)

    @property
    def devices(self) -> tuple[int, ...]:
        out: list[int] = []
        for g in self.groups:
            out.extend(g.devices)
        return tuple(out)

    def with_algorithm(self, name: str, **meta: Any) -> Plan:
        return replace(self, algorithm=name, meta={**self.meta, **meta})
