"""Closed-loop cluster replay: workers, cold start, colocated shift, accounting."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from distrs.core.priority import QueuePolicy
from distrs.core.stages import ResourceClass, StageSpec
from distrs.scaling.context import PolicyOptions
from distrs.sim.cluster import ClusterParams, replay
from distrs.sim.experiments import compare_policies
from distrs.sim.generator import GeneratorParams, generate
from distrs.sim.trace import Trace, load

ONE = [StageSpec("run", ResourceClass.CPU, 100.0, 1.0)]


def trace(rows: list[tuple[int, int, float, float, float]], mode: str = "disaggregated") -> Trace:
    """rows: (task, iteration, rollout_start, arrival, s_run)."""
    a = np.array(rows, dtype=float)
    return Trace(
        mode=mode,
        stages=ONE,
        task_names=[f"t{i}" for i in range(int(a[:, 0].max()) + 1)],
        status_names=["success"],
        task=a[:, 0].astype(np.int64),
        iteration=a[:, 1].astype(np.int64),
        request=np.arange(len(rows)),
        rollout_start=a[:, 2],
        arrival=a[:, 3],
        status=np.zeros(len(rows), dtype=np.int64),
        s=a[:, 4:5],
    )


def static(n: int, **kw) -> ClusterParams:
    base = {"policy": "static", "cold_start_s": 0.0, "options": PolicyOptions(static_replicas=n)}
    base.update(kw)
    return ClusterParams(**base)  # type: ignore[arg-type]


def test_one_worker_queues_the_second_request():
    r = replay(trace([(0, 0, 0.0, 1.0, 4.0), (0, 0, 0.0, 1.0, 4.0)]), static(1))
    (b,) = r.batches
    assert b.earliest_completion == 5.0 and b.completion == 9.0 and b.extra_delay == 4.0
    assert r.busy_seconds == {"run": 8.0}
    # one worker from the hint (t=0) until the batch completes (t=9)
    assert r.worker_seconds["run"] == pytest.approx(9.0)


def test_a_request_without_stage_time_enters_the_service_only_when_told():
    # one worker busy 1-5; an empty request (s = 0) arrives at 2
    rows = [(0, 0, 0.0, 1.0, 4.0), (0, 0, 0.0, 2.0, 0.0)]
    literal = replay(trace(rows), static(1))
    assert literal.batches[0].completion == 5.0  # done on arrival, never queued
    assert literal.busy_seconds == {"run": 4.0}
    live = replay(trace(rows), static(1, empty_request_s=0.5))
    # it waits for the worker and runs 0.5 s at the first stage, like a worker failing it at once
    assert live.batches[0].completion == pytest.approx(5.5)
    assert live.busy_seconds == {"run": pytest.approx(4.5)}
    assert live.batches[0].earliest_completion == pytest.approx(5.0)


def test_handoff_occupies_the_worker_but_is_not_busy_time_or_T():
    r = replay(trace([(0, 0, 0.0, 1.0, 4.0), (0, 0, 0.0, 1.0, 4.0)]), static(1, handoff_s=0.25))
    (b,) = r.batches
    # first visit ends at 5.25, the second starts then and ends at 9.5
    assert b.completion == pytest.approx(9.5) and b.earliest_completion == 5.0
    assert r.busy_seconds == {"run": 8.0}
    assert r.worker_seconds["run"] == pytest.approx(9.5)


def test_bundles_share_the_handoff_of_short_visits_only():
    short = [(0, 0, 0.0, 1.0, 0.05)] * 4
    alone = replay(trace(short), static(1, handoff_s=0.2))
    bundled = replay(trace(short), static(1, handoff_s=0.2, max_bundle=8, bundle_target_s=0.25))
    # 0.05 s visits go 5 to a bundle (0.25 s worth): each pays 0.2 / 5 of hand-off, not 0.2
    assert alone.batches[0].completion == pytest.approx(1.0 + 4 * 0.25)
    assert bundled.batches[0].completion == pytest.approx(1.0 + 4 * (0.05 + 0.04))
    assert bundled.busy_seconds == alone.busy_seconds == {"run": pytest.approx(0.2)}
    # a long visit goes alone: the full hand-off, bundles or not
    long = [(0, 0, 0.0, 1.0, 4.0)] * 2
    one = replay(trace(long), static(1, handoff_s=0.25, max_bundle=8))
    assert one.batches[0].completion == pytest.approx(9.5)


def test_cold_start_delays_work_when_not_hidden():
    # hint at 0, request at 1, workers usable at 5 → it finishes at 7 instead of 3
    r = replay(trace([(0, 0, 0.0, 1.0, 2.0)]), static(1, cold_start_s=5.0))
    assert r.batches[0].extra_delay == pytest.approx(4.0)


def test_cold_start_hidden_by_the_rollout_hint():
    # the hint comes 30 s before the first request: a 15 s cold start costs nothing
    r = replay(trace([(0, 0, 0.0, 30.0, 2.0)]), static(1, cold_start_s=15.0))
    assert r.batches[0].extra_delay == 0.0


@pytest.mark.parametrize(("mode", "second_anchor"), [("colocated", 104.0), ("disaggregated", 100.0)])
def test_colocated_batches_shift_by_the_delay_they_suffer(mode, second_anchor):
    rows = [(0, 0, 0.0, 1.0, 4.0), (0, 0, 0.0, 1.0, 4.0), (0, 1, 100.0, 101.0, 1.0)]
    r = replay(trace(rows, mode), static(1))
    first, second = r.batches
    assert first.extra_delay == 4.0
    assert second.anchor == second_anchor
    assert second.earliest_completion == second_anchor + 2.0


@pytest.mark.parametrize(("queue", "first_done"), [(QueuePolicy.EBF, 7.0), (QueuePolicy.FCFS, 10.0)])
def test_queue_policy_in_the_cluster(queue, first_done):
    # task 0's batch ends early (T=7), task 1's late; one worker is busy until 5 when both wait
    rows = [(0, 0, 0.0, 0.0, 5.0), (1, 0, 0.0, 1.0, 3.0), (0, 0, 0.0, 2.0, 2.0), (1, 0, 0.0, 3.0, 100.0)]
    r = replay(trace(rows), static(1, queue_policy=queue, oracle_priority=True))
    done = {b.task: b.completion for b in r.batches}
    assert done["t0"] == first_done


def test_invariants_for_every_policy_on_a_generated_trace():
    tr = generate(GeneratorParams(tasks=2, iterations=3, batch=128, seed=4))
    results = compare_policies(tr, ["distrs", "history", "zq-dedicated", "ideal"], ClusterParams())
    busy = None
    for name, r in results.items():
        assert len(r.batches) == 6, name  # every batch completes: no request lost or stranded
        assert all(b.extra_delay >= 0 for b in r.batches)
        for s in r.stages:
            assert r.worker_seconds[s] >= r.busy_seconds[s] - 1e-6
        # busy time is the trace's work whatever the policy: nothing killed mid-request
        busy = busy or r.busy_seconds
        assert r.busy_seconds == pytest.approx(busy)
        assert len(r.planner_s) == len(r.decisions) > 0
        assert r.timeline["execute"][-1][1] == 0  # everything released at the end
        for s in r.stages:  # the ledger accounts for every allocated worker-second
            assert r.busy_seconds[s] + sum(r.ledger[s].values()) == pytest.approx(r.worker_seconds[s])
    assert results["zq-dedicated"].worker_seconds["execute"] > results["distrs"].worker_seconds["execute"]
    s = results["distrs"].summary()
    assert set(s) == {"worker_seconds", "busy_seconds", "extra_delay_s", "batches", "planner_s", "ledger"}
    assert set(s["extra_delay_s"]) == {"mean", "p50", "p99", "max"}


def test_periodic_replans_may_remove_workers_mid_batch():
    tr = generate(GeneratorParams(tasks=1, iterations=2, batch=256, seed=3))
    events_only = replay(tr, ClusterParams(policy="distrs", replan_interval_s=None))
    both = replay(tr, ClusterParams(policy="distrs", replan_interval_s=20.0))
    up_only = replay(tr, ClusterParams(policy="distrs", replan_interval_s=20.0, replan_scale_down=False))
    assert len(both.decisions) > len(events_only.decisions)
    for r in (events_only, both, up_only):
        assert len(r.batches) == 2 and all(b.extra_delay >= 0 for b in r.batches)
    # a re-plan that may also shrink the pool trims the tail of each batch
    assert both.worker_seconds["compile"] < up_only.worker_seconds["compile"]
    counts = [rep["compile"] for _, rep in both.decisions]
    assert any(0 < b < a for a, b in itertools.pairwise(counts))


SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces" / "cuda-colocated.csv.gz"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.exists(), reason="shared traces not present")
def test_slice_of_the_shared_colocated_trace_end_to_end():
    tr = load(SHARED)
    tr = tr.select(tr.iteration < 3)
    res = compare_policies(tr, ["distrs", "zq-dedicated", "ideal"], ClusterParams())
    assert all(len(r.batches) == 18 for r in res.values())
    d, z, i = res["distrs"], res["zq-dedicated"], res["ideal"]
    assert z.worker_seconds["execute"] > d.worker_seconds["execute"] > 0.9 * i.worker_seconds["execute"]
    assert d.summary()["extra_delay_s"]["mean"] < 60.0


def test_policies_replayed_in_parallel_give_the_same_results():
    tr = generate(GeneratorParams(tasks=2, iterations=2, batch=64, seed=5))
    one = compare_policies(tr, ["distrs", "zq-dedicated", "ideal"], ClusterParams(), jobs=1)
    two = compare_policies(tr, ["distrs", "zq-dedicated", "ideal"], ClusterParams(), jobs=2)
    assert list(two) == list(one)
    for name in one:
        assert two[name].worker_seconds == one[name].worker_seconds
        assert [b.completion for b in two[name].batches] == [b.completion for b in one[name].batches]


def test_first_batches_see_finished_requests_in_submission_order(monkeypatch):
    """The planner's finished sample is what the store shows: in submission order (the memory
    store's evenly spaced sample), not finishing order, so the in-batch profile, which assigns
    the sample's stage times in turn, is the same in the simulator and in the live service."""
    import distrs.sim.cluster as cluster

    seen, plan = [], cluster.plan

    def record(ctx):
        seen.append((ctx.now, [list(b.finished) for b in ctx.batches]))
        return plan(ctx)

    monkeypatch.setattr(cluster, "plan", record)
    # r0 arrives first and finishes last; r2 keeps the batch active until the re-plan at 15.
    rows = [(0, 0, 0.0, 1.0, 10.0), (0, 0, 0.0, 2.0, 1.0), (0, 0, 0.0, 12.0, 50.0)]
    replay(trace(rows), static(2, replan_interval_s=15.0))
    at_15 = next(f for t, f in seen if t == 15.0)
    assert at_15 == [[{"run": 10.0}, {"run": 1.0}]]
