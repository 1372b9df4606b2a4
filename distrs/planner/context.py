"""Turning live store state into the pure scaling input (``PlanContext``).

The store's snapshot gives Alg. 2's Queuing_k / Running_k (with elapsed time) per active batch;
``history`` gives each task's last K batch profiles. This module only reshapes data.
"""

from __future__ import annotations

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
    tasks = sorted({b.task for b in batches})
    histories = {t: await store.history(t) for t in tasks}
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
