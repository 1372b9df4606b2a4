"""SIMULATE (Alg. 1 line 12): hand-checked cases, table-driven."""

from __future__ import annotations

import numpy as np
import pytest

from distrs.core.priority import QueuePolicy
from distrs.scaling.simulate import simulate

from .build import ONE, TWO, stages, workload

EBF, FCFS = QueuePolicy.EBF, QueuePolicy.FCFS


@pytest.mark.parametrize(
    ("arrival", "service", "workers", "D", "finish", "ok"),
    [
        # one worker, requests back to back: no waiting at all
        ([0, 1, 2], [[1], [1], [1]], 1, 0.0, 3.0, True),
        # two at once on one worker: the second waits 2 s → finishes at 4, T = 2
        ([0, 0], [[2], [2]], 1, 1.0, 4.0, False),
        ([0, 0], [[2], [2]], 1, 2.0, 4.0, True),
        # two workers: both start at once
        ([0, 0], [[2], [2]], 2, 0.0, 2.0, True),
    ],
)
def test_single_stage_fcfs(arrival, service, workers, D, finish, ok):
    wl = workload(ONE, arrival, service)
    res = simulate(wl, [workers], wl.batch_T + D, FCFS, timeout_aware=False)
    assert res.satisfied is ok
    if ok:
        assert res.batch_finish[0] == pytest.approx(finish)


def test_timeout_aware_rule_rejects_queuing_that_could_run_to_the_timeout():
    # Sec. 5.1: the second request waits 1 s; if it then ran to the 100 s timeout it would end
    # at 101 > T + D = 1 + 5, so the timeout-aware check fails although the estimate (finish 2) fits.
    wl = workload(ONE, [0, 0], [[1], [1]])
    dl = wl.batch_T + 5.0
    assert simulate(wl, [1], dl, FCFS, timeout_aware=False).satisfied
    res = simulate(wl, [1], dl, FCFS, timeout_aware=True)
    assert not res.satisfied and res.stage == "run"
    # enough workers that nobody waits: the rule has nothing to object to
    assert simulate(wl, [2], dl, FCFS, timeout_aware=True).satisfied


def test_timeout_rule_allows_waiting_early_in_the_batch():
    # a long batch (T = 500): waiting at t≈0 leaves room for a full timeout (0 + 100 < 500)
    wl = workload(ONE, [0, 0, 400], [[1], [1], [100]])
    assert simulate(wl, [1], wl.batch_T + 0.0, FCFS, timeout_aware=True).satisfied


def test_running_requests_hold_their_workers():
    # one worker busy 5 more seconds; the queued request starts when it frees
    wl = workload(ONE, [0, 0], [[5], [1]], first_stage=[0, 0], running=[True, False], batch_T=[100])
    res = simulate(wl, [1], np.array([100.0]), FCFS, timeout_aware=False)
    assert res.completion.tolist() == [5.0, 6.0]


def test_fewer_workers_than_running_retire_as_they_free():
    # two running (2 s and 4 s left) but N=1: the worker freed at 2 retires; the one freed at 4 serves
    wl = workload(ONE, [0, 0, 0], [[2], [4], [1]], running=[True, True, False], batch_T=[100])
    res = simulate(wl, [1], np.array([100.0]), FCFS, timeout_aware=False)
    assert res.completion.tolist() == [2.0, 4.0, 5.0]


@pytest.mark.parametrize(("policy", "a_done", "b_done"), [(EBF, 6.0, 9.0), (FCFS, 9.0, 8.0)])
def test_ebf_serves_the_earlier_batch_first(policy, a_done, b_done):
    # one worker busy until 5 with batch A (T=10); B (T=100) arrives at 1, A's second request at 2
    wl = workload(ONE, [0, 1, 2], [[5], [3], [1]], batch=[0, 1, 0], batch_T=[10, 100])
    res = simulate(wl, [1], np.array([1e9, 1e9]), policy, timeout_aware=False)
    assert res.completion[2] == a_done
    assert res.completion[1] == b_done


@pytest.mark.parametrize(
    ("service", "workers", "completion"),
    [
        ([[1, 2]], [1, 1], [3.0]),  # both stages in series
        ([[0, 2]], [1, 1], [2.0]),  # skips compile
        ([[1, 0]], [1, 0], [1.0]),  # never reaches execute: no execute worker needed
        ([[1, 2], [1, 2]], [2, 1], [3.0, 5.0]),  # second waits at execute
    ],
)
def test_stages_in_series(service, workers, completion):
    wl = workload(TWO, [0.0] * len(service), service, batch_T=[1e9])
    res = simulate(wl, workers, np.array([1e9]), FCFS, timeout_aware=False)
    assert res.satisfied
    assert res.completion.tolist() == completion


def test_no_workers_for_a_needed_stage_fails():
    wl = workload(TWO, [0], [[1, 2]])
    res = simulate(wl, [1, 0], np.array([1e9]), FCFS)
    assert not res.satisfied and res.reason == "no-workers" and res.stage == "execute"


def test_queued_request_starts_at_its_stage():
    # queued at execute (first_stage=1): compile time is ignored
    st = stages(("compile", 120.0, 1.0), ("execute", 60.0, 8.0))
    wl = workload(st, [10], [[0, 3]], first_stage=[1], batch_T=[100])
    res = simulate(wl, [0, 1], np.array([100.0]), FCFS)
    assert res.completion.tolist() == [13.0]


@pytest.mark.parametrize(("check", "ok"), [("enqueue", True), ("start", False)])
def test_when_the_timeout_rule_reads_ts(check, ok):
    # T = 150, D = 0, timeout 100: a request may be found queued only while ts + 100 <= 150.
    # The second request joins the queue at 40 (40 + 100 <= 150: fine when checked on joining)
    # but starts at 60 after waiting (60 + 100 > 150: fails when checked just before starting).
    wl = workload(ONE, [0, 40, 149], [[60], [1], [1]])
    assert wl.batch_T[0] == pytest.approx(150.0)
    res = simulate(wl, [1], wl.batch_T + 0.0, FCFS, timeout_aware=True, timeout_check=check)
    assert res.satisfied is ok


def test_unknown_timeout_check_is_refused():
    wl = workload(ONE, [0], [[1]])
    with pytest.raises(ValueError, match="timeout_check"):
        simulate(wl, [1], wl.batch_T, FCFS, timeout_check="later")


def test_busy_peaks_counts_only_work_before_the_horizon():
    from distrs.scaling.simulate import busy_peaks

    # three requests at 0, 10 and 50, 20 s each, three workers: 2 busy at once before t=30,
    # only 1 before t=5, and all three never overlap (the first ends at 20, the third starts at 50)
    wl = workload(ONE, [0, 10, 50], [[20], [20], [20]])
    assert busy_peaks(wl, [3], 5.0, FCFS) == [1]
    assert busy_peaks(wl, [3], 30.0, FCFS) == [2]
    assert busy_peaks(wl, [3], 1e9, FCFS) == [2]
    # one worker: never more than one busy whatever the horizon
    assert busy_peaks(wl, [1], 1e9, FCFS) == [1]
    # nothing before the horizon
    assert busy_peaks(workload(ONE, [100], [[1]]), [2], 50.0, FCFS) == [0]


@pytest.mark.parametrize(("allowance", "ok"), [(None, False), (0.5, False), (1.0, True), (5.0, True)])
def test_per_request_rule_lets_a_tail_request_wait_what_it_may_add_to_d(allowance, ok):
    # The Sec. 5.1 example again: the second request waits 1 s, and run to its 100 s timeout it
    # would end at 101 > T + D = 6. But then T itself would be 100 (its own zero-queuing finish):
    # the batch would be late by its 1 s of waiting, no more. With an allowance of D (the
    # policies' default) it may wait up to D; the paper's rule (None) lets it wait not at all.
    wl = workload(ONE, [0, 0], [[1], [1]])
    res = simulate(wl, [1], wl.batch_T + 5.0, FCFS, timeout_aware=True, request_allowance_s=allowance)
    assert res.satisfied is ok


def test_per_request_allowance_counts_the_wait_upstream():
    # Two stages, deadline 50 for every request: every arrival is inside the timeout rule's
    # window (50 − 60 < 0 at execute), so a request may wait only its allowance in all.
    # Both requests compile 1 s on one worker: the second waits 1 s there, then execute is free.
    wl = workload(TWO, [0, 0], [[1, 1], [1, 1]], batch_T=[48.5])
    dl = np.array([50.0])
    assert simulate(wl, [1, 2], dl, FCFS, timeout_aware=True, request_allowance_s=1.5).satisfied
    assert not simulate(wl, [1, 2], dl, FCFS, timeout_aware=True, request_allowance_s=0.5).satisfied
    # A third request is queued at execute at t=1, when the first gets there: one execute
    # worker runs the first 1-2 and the third 2-3. The second reaches execute at 2 after its
    # 1 s at compile and waits until 3: 2 s in all, counted from when it would have got there
    # (t=1) had it never waited. Over an allowance of 1.5 s, within one of 2.5 s.
    three = workload(TWO, [0, 0, 1], [[1, 1], [1, 1], [0, 1]], first_stage=[0, 0, 1], batch_T=[48.5])
    res = simulate(three, [1, 1], dl, FCFS, timeout_aware=True, request_allowance_s=1.5)
    assert not res.satisfied and res.stage == "execute"
    ok = simulate(three, [1, 1], dl, FCFS, timeout_aware=True, request_allowance_s=2.5)
    assert ok.satisfied and ok.completion.tolist() == [2.0, 4.0, 3.0]
