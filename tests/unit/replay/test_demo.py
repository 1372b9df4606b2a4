"""``distrs demo``'s own parts: pool sizing from the slice, the plan log, the learning table."""

from __future__ import annotations

import numpy as np
from rich.console import Console

from distrs.core.stages import ResourceClass, StageSpec
from distrs.replay.demo import PlanLog, d_text, learning_table, stage_caps, stage_peaks
from distrs.replay.driver import BatchReport
from distrs.scaling.context import ActiveBatch, Decision, PlanContext
from distrs.sim.trace import Trace

TWO = [
    StageSpec("compile", ResourceClass.CPU, 120.0, 1.0),
    StageSpec("execute", ResourceClass.GPU, 60.0, 8.0),
]


def test_pools_are_sized_to_what_the_slice_keeps_busy_at_once() -> None:
    # compile: three at once (0-10, 2-12, 5-15), execute: two (10-11 and 12-13 do not meet;
    # the third request skips compile and executes 11-13, meeting the second)
    arrival = np.array([0.0, 2.0, 11.0, 5.0])
    s = np.array([[10.0, 1.0], [10.0, 1.0], [0.0, 2.0], [10.0, 0.0]])
    tr = Trace(
        mode="colocated",
        stages=TWO,
        task_names=["t"],
        status_names=["success"],
        task=np.zeros(4, dtype=np.int64),
        iteration=np.zeros(4, dtype=np.int64),
        request=np.arange(4),
        rollout_start=np.zeros(4),
        arrival=arrival,
        status=np.zeros(4, dtype=np.int64),
        s=s,
    )
    assert stage_peaks(tr) == {"compile": 3, "execute": 2}
    assert stage_caps({"compile": 3, "execute": 2}, max_workers=64) == {"compile": 5, "execute": 3}
    assert stage_caps({"compile": 52, "execute": 0}, max_workers=64) == {"compile": 64, "execute": 1}


def test_the_plan_log_keeps_the_first_estimate_and_where_plans_came_from() -> None:
    log = PlanLog()
    b = ActiveBatch("tenant/task-0", "it0", "synthetic", 64, anchor=1000.0)
    ctx = PlanContext(now=1000.0, stages=TWO, batches=[b])
    for est, src in ((1045.0, "default"), (1030.0, "in-batch"), (1031.0, "in-batch"), (1028.0, "pooled:x")):
        plan = log.wrap(
            lambda c, est=est, src=src: Decision(
                replicas={}, estimated_completion={b.key: est}, debug={"sources": {"tenant/task-0/it0": src}}
            )
        )
        plan(ctx)
    (entry,) = log.batches.values()
    assert ("task-0", "it0") in log.batches  # the trainer's name, without the tenant
    assert entry.first_estimate == 45.0
    assert entry.sources == ["default", "in-batch", "pooled:x"]


def test_the_learning_table_sets_the_first_iteration_against_the_later_ones() -> None:
    log = PlanLog()
    ctx_batches = []
    reports = []
    for it, (est, real, d, src) in enumerate(((45.0, 22.0, 0.3, "default"), (23.0, 22.5, 0.05, "own"))):
        b = ActiveBatch("task-0", f"it{it}", "synthetic", 64, anchor=100.0 * it)
        ctx_batches.append(b)
        log.record(
            PlanContext(now=b.anchor, stages=TWO, batches=[b]),
            Decision(
                replicas={},
                estimated_completion={b.key: b.anchor + est},
                debug={"sources": {f"task-0/it{it}": src}},
            ),
        )
        reports.append(BatchReport("task-0", f"it{it}", 64, d, earliest_s=real))
    console = Console(width=100, record=True, color_system=None)
    console.print(learning_table(reports, log))
    text = console.export_text()
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert rows[0][0] == "0" and "default" in rows[0] and "23.0" in rows[0] and "0.30" in rows[0]
    assert rows[1][0] == "1" and "previous" in rows[1] and "0.5" in rows[1] and "0.05" in rows[1]


def test_the_demo_says_what_d_is_and_what_bounds_it() -> None:
    text = d_text(20.0)
    assert "earliest possible" in text and "T + D" in text and "D = 1 s" in text and "20 s of trace" in text
    assert "first batch has no history" in text
