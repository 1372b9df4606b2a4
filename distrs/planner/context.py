"""Turning live store state into the pure scaling input (``PlanContext``).

The store's snapshot gives Alg. 2's Queuing_k / Running_k (with elapsed time) per active batch;
``history`` gives each task's last K batch profiles. This module only reshapes data. The
sample of finished requests is read only for reward types without any history (a second
snapshot, while a deployment's first batches run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distrs.core.history import BatchProfile
from distrs.core.stages import PipelineTable
from distrs.scaling.context import ActiveBatch, PlanContext, PolicyOptions
from distrs.store.base import QueueStore, Snapshot


def active_batches(snap: Snapshot, default_type: str) -> list[ActiveBatch]:
    out = []
    for live in snap.batches:
        b = live.batch
        out.append(
            ActiveBatch(
                task=b.task,
                batch_id=b.batch_id,
                reward_type=b.reward_type or default_type,
                size=b.size,
                anchor=b.anchor,
                submitted=b.submitted,
                queued=dict(live.queued),
                running_elapsed={k: list(v) for k, v in live.running_elapsed.items()},
                finished=live.finished,
            )
        )
    return out


def reward_types_without_history(
    batches: Sequence[ActiveBatch], histories: Mapping[str, Sequence[BatchProfile]]
) -> set[str]:
    """Reward types none of whose active tasks has a finished batch: their batches are planned
    from the finished requests of the type's active batches (``scaling/fallback.py``)."""
    known = set()
    for b in batches:
        profiles = histories.get(b.task) or ()
        if profiles:
            known.add(profiles[-1].reward_type or b.reward_type)
    return {b.reward_type for b in batches} - known


async def build_context(
    store: QueueStore,
    table: PipelineTable,
    now: float,
    policy: str,
    max_extra_delay_s: float,
    max_replicas: int,
    options: PolicyOptions,
    default_type: str = "synthetic",
) -> PlanContext:
    snap = await store.snapshot(now)
    batches = active_batches(snap, default_type)
    histories = {t: await store.history(t) for t in sorted({b.task for b in batches})}
    learning = reward_types_without_history(batches, histories)
    if learning:  # first batches of these types learn from their finished requests
        snap = await store.snapshot(now, finished_types=learning)
        batches = active_batches(snap, default_type)
        for t in sorted({b.task for b in batches} - histories.keys()):
            histories[t] = await store.history(t)
    return PlanContext(
        now=now,
        stages=list(table.stages.values()),
        batches=batches,
        histories=histories,
        max_extra_delay_s=max_extra_delay_s,
        max_replicas=max_replicas,
        policy=policy,
        options=options,
        reward_stages={name: list(rt.stages) for name, rt in table.reward_types.items()},
    )
