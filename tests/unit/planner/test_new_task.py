"""A new task's first batch (no history) arriving while a busy tenant's batch fills the queue:
EBF (DistRS Sec. 5.2) serves the busy batch first, because its estimated completion T is the
earlier one, so it is the re-plan at the new batch's arrival (Alg. 2 collects every active
batch, Alg. 1 searches with an EBF-aware SIMULATE) that must give the new batch workers of its
own. benchmarks/recovery.py measures the same live."""

from __future__ import annotations

from distrs.core.history import BatchProfile, RequestProfile
from distrs.core.pipeline_config import load_pipelines
from distrs.scaling.context import ActiveBatch, PlanContext, PolicyOptions
from distrs.scaling.policies import plan

TABLE = load_pipelines(None)
BUSY = 30


def busy_history() -> list[BatchProfile]:
    """Two finished batches of the busy task: 30 requests arriving at once, 0.5 s + 0.1 s."""
    reqs = tuple(RequestProfile(0.01, {"compile": 0.5, "execute": 0.1}) for _ in range(BUSY))
    return [BatchProfile("b/busy", f"h{i}", 10.0 * i, reqs, "synthetic") for i in range(2)]


def context(with_new_task: bool, rule: str = "request") -> PlanContext:
    busy = ActiveBatch(
        "b/busy", "big", "synthetic", BUSY, anchor=100.0, submitted=BUSY,
        queued={"compile": BUSY - 2}, running_elapsed={"compile": [0.4, 0.4]},
    )  # fmt: skip
    batches = [busy]
    if with_new_task:
        batches.append(
            ActiveBatch("a/fresh", "first", "synthetic", 4, anchor=100.5, submitted=4, queued={"compile": 4})
        )
    return PlanContext(
        now=100.5,
        stages=list(TABLE.stages.values()),
        batches=batches,
        histories={"b/busy": busy_history()},
        max_extra_delay_s=1.0,
        max_replicas=64,
        reward_stages={name: list(rt.stages) for name, rt in TABLE.reward_types.items()},
        options=PolicyOptions(timeout_rule=rule),  # type: ignore[arg-type]
    )


def test_the_new_batch_is_estimated_from_its_reward_types_history_not_minutes() -> None:
    d = plan(context(with_new_task=True))
    t_new = d.estimated_completion[("a/fresh", "first")]
    t_busy = d.estimated_completion[("b/busy", "big")]
    # pooled from the busy task's profile (same reward type): about 0.6 s after its own anchor
    assert 100.5 < t_new < 100.5 + 2.0
    assert t_busy < t_new  # so EBF serves the busy batch first, as Sec. 5.2 says


def test_the_replan_at_the_new_batchs_arrival_gives_it_workers_of_its_own() -> None:
    # Sec. 5.1's rule: its 4 requests, all in their tail, may not wait at all behind the busy
    # batch's 28 under EBF: they get 4 more workers
    alone = plan(context(with_new_task=False, rule="batch")).replicas["compile"]
    both = plan(context(with_new_task=True, rule="batch")).replicas["compile"]
    assert both >= alone + 4
    # per-request deadline: each may wait up to D for a worker the busy batch frees, so fewer
    # are added, still enough that the plan meets both batches' deadlines
    alone = plan(context(with_new_task=False)).replicas["compile"]
    d = plan(context(with_new_task=True))
    assert d.replicas["compile"] > alone and d.debug["satisfiable"]
