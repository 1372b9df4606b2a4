"""The gap breakdown (``distrs bench scaling --explain``) on a trace whose gap is worked out by hand.

One batch, one stage (timeout 10 s), D = 0.2 s, workers ready at once, decisions only at batch
events. Three requests arrive at t = 10: A runs 5 s, B and C 0.5 s each, so T = 15.

* Ideal (exact requests, no timeout rule): 2 workers. A on one, B then C on the other; C
  waits 0.5 s and ends at 11, well before T + D. Held from the hint (t = 0) to the batch's
  end (t = 15): 30 worker-seconds, 6 of them busy; both workers idle 10 s before their first
  request, B and C's worker 4 s after its last.
* With the timeout rule, C's wait is not allowed: were C to run to its 10 s timeout it would
  set T itself (20 s), and then any wait over D would be extra delay. So 3 workers, 45
  worker-seconds: the 15 more are the timeout reservation, 10 idle before the first request
  and 5 after the last.
* distrs has no history for the batch; its first-batch default is set to the truth's shape
  (three requests at r = 10 of 0.5 × 10 s each), which also asks for 3 workers, and T_b = 15
  is right: the history steps are 0.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from distrs.core.stages import ResourceClass, StageSpec
from distrs.scaling.context import PolicyOptions
from distrs.sim.cluster import ClusterParams, replay
from distrs.sim.explain import STEPS, explain, explain_markdown
from distrs.sim.trace import Trace

RUN = [StageSpec("run", ResourceClass.GPU, 10.0, 8.0)]


def one_batch() -> Trace:
    s = np.array([[5.0], [0.5], [0.5]])
    return Trace(
        mode="disaggregated",
        stages=RUN,
        task_names=["t0"],
        status_names=["success"],
        task=np.zeros(3, dtype=np.int64),
        iteration=np.zeros(3, dtype=np.int64),
        request=np.arange(3),
        rollout_start=np.zeros(3),
        arrival=np.full(3, 10.0),
        status=np.zeros(3, dtype=np.int64),
        s=s,
    )


PARAMS = ClusterParams(
    max_extra_delay_s=0.2,
    cold_start_s=0.0,
    replan_interval_s=None,
    options=PolicyOptions(default_first_s=10.0, default_span_s=10.0, default_stage_fraction=0.5),
)


def test_the_gap_is_the_timeout_reservation_worked_out_by_hand():
    ex = explain(one_batch(), PARAMS)
    assert ex.rungs["ideal"].worker_seconds["run"] == pytest.approx(30.0)
    assert ex.rungs["distrs"].worker_seconds["run"] == pytest.approx(45.0)
    assert ex.gap("run") == pytest.approx(15.0)
    steps = {cause: ex.step(a, b, "run") for cause, a, b in STEPS}
    timeout = steps["timeout reservations (timeout-aware rule)"]
    assert timeout["total"] == pytest.approx(15.0)
    assert timeout["ahead"] == pytest.approx(10.0) and timeout["after"] == pytest.approx(5.0)
    for cause, step in steps.items():
        if cause != "timeout reservations (timeout-aware rule)":
            assert step["total"] == pytest.approx(0.0), cause
    # every batch still ends by T + D on every rung
    assert all(b.extra_delay <= 0.2 for r in ex.rungs.values() for b in r.batches)


def test_ideal_worker_seconds_split_by_state():
    r = replay(one_batch(), replace(PARAMS, policy="ideal"))
    assert r.busy_seconds["run"] == pytest.approx(6.0)
    assert r.ledger["run"] == pytest.approx(
        {"startup": 0.0, "ahead": 20.0, "between": 0.0, "after": 4.0, "handoff": 0.0}
    )


def test_steps_and_states_each_sum_to_the_gap_on_a_generated_slice(demo_slice: Trace):
    ex = explain(demo_slice, ClusterParams())
    for stage in ex.stages:
        rows = [ex.step(a, b, stage) for _, a, b in STEPS]
        assert sum(r["total"] for r in rows) == pytest.approx(ex.gap(stage))
        parts = ("startup", "ahead", "between", "after", "handoff")
        assert sum(r[p] for r in rows for p in parts) == pytest.approx(ex.gap(stage))
    md = explain_markdown(ex, "demo")
    assert "timeout reservations" in md and "total = distrs − ideal" in md
    assert set(ex.as_json()["steps"]) == set(ex.stages)


@pytest.fixture
def demo_slice() -> Trace:
    from distrs.commands.bench import _load

    tr: Trace = _load("demo", 2)
    return tr.select(tr.task < 2)
