"""Alg. 1: bounds, the unsatisfiable and late cases, cost order, warm start."""

from __future__ import annotations

import numpy as np
import pytest

from distrs.core.priority import QueuePolicy
from distrs.scaling.search import deadlines, request_floors, search, useful_concurrency, work_lower_bounds
from distrs.scaling.simulate import Simulator, simulate

from .build import ONE, TWO, workload


@pytest.mark.parametrize(
    ("arrival", "service", "expected"),
    [
        ([0, 0, 0], [[1], [1], [1]], [3]),
        ([0, 1, 2], [[1], [1], [1]], [1]),  # back to back: a departure and an arrival at t=1 don't overlap
        ([0, 0.5, 10], [[1], [1], [1]], [2]),
        ([], [], [0]),
    ],
)
def test_useful_concurrency(arrival, service, expected):
    assert useful_concurrency(workload(ONE, arrival, service)) == expected


def test_useful_concurrency_per_stage_follows_zero_queuing_upstream():
    # compile [0,2] and [1,3]; execute [2,3] and [3,4] → 2 compile, 1 execute
    wl = workload(TWO, [0, 1], [[2, 1], [2, 1]])
    assert useful_concurrency(wl) == [2, 1]


def test_search_finds_the_minimum_for_a_simple_batch():
    # 4 requests of 10 s at t=0, T=10, D=10: two workers finish at 20 ≤ 20, one would end at 40
    wl = workload(ONE, [0, 0, 0, 0], [[10]] * 4)
    res = search(wl, ONE, 10.0, policy=QueuePolicy.FCFS, timeout_aware=False)
    assert res.replicas == {"run": 2}
    assert res.satisfiable and res.upper_bounds == {"run": 4}


def test_upper_bound_is_useful_concurrency_not_batch_size():
    # 1000 requests strictly one after another: one worker is all anything could ever use
    n = 1000
    wl = workload(ONE, list(range(n)), [[0.5]] * n)
    res = search(wl, ONE, 0.0, timeout_aware=False)
    assert res.upper_bounds == {"run": 1}
    assert res.replicas == {"run": 1}


def test_unsatisfiable_under_the_replica_cap_returns_the_cap_not_B():
    # ten 10-s requests at once with D=0 need 10 workers; the cap is 4
    wl = workload(ONE, [0] * 10, [[10]] * 10)
    res = search(wl, ONE, 0.0, max_replicas=4, timeout_aware=False)
    assert res.satisfiable is False
    assert res.replicas == {"run": 4}


def test_a_stage_cap_bounds_that_stage_only():
    # three 5-s requests at once on two stages with D=0 need 3 of each; compile may have 2
    wl = workload(TWO, [0, 0, 0], [[5, 5]] * 3)
    free = search(wl, TWO, 0.0, timeout_aware=False)
    assert free.satisfiable and free.replicas == {"compile": 3, "execute": 3}
    res = search(wl, TWO, 0.0, timeout_aware=False, stage_max={"compile": 2})
    assert res.upper_bounds["compile"] == 2 and res.replicas["compile"] == 2
    assert res.satisfiable is False  # the planner knows it cannot meet D with the cap


def test_late_request_gets_its_own_deadline_instead_of_everything():
    # a request queued now needs 50 s but the batch was estimated to end in 10 s: T + D cannot be
    # met by any allocation. That request may finish by its zero-queuing finish (50) + D; the
    # three small ones keep T + D = 12, so two workers (not the batch size) are enough.
    wl = workload(ONE, [0, 0, 0, 0], [[50], [1], [1], [1]], batch_T=[10.0])
    dl, late = deadlines(wl, 2.0)
    assert late == [0] and dl[0] == pytest.approx(12.0)
    assert request_floors(wl, 2.0).tolist() == [52.0, 3.0, 3.0, 3.0]
    res = search(wl, ONE, 2.0, timeout_aware=False)
    assert res.satisfiable and res.late == [0]
    assert res.replicas == {"run": 2}


def test_stages_are_searched_most_expensive_first():
    wl = workload(TWO, [0, 0, 0], [[5, 5]] * 3)
    res = search(wl, TWO, 100.0, timeout_aware=False)
    assert list(res.stage_seconds) == ["execute", "compile"]


def test_no_requests_no_workers():
    res = search(workload(TWO, [], []), TWO, 2.0)
    assert res.replicas == {"compile": 0, "execute": 0}


def test_work_lower_bound_is_below_the_answer():
    rng = np.random.default_rng(3)
    wl = workload(TWO, np.sort(rng.uniform(0, 100, 300)), rng.uniform(1, 20, (300, 2)))
    dl, _ = deadlines(wl, 2.0)
    lower = work_lower_bounds(wl, dl)
    res = search(wl, TWO, 2.0)
    assert all(lo <= res.replicas[s] for lo, s in zip(lower, ["compile", "execute"], strict=True))


def test_the_per_request_bound_by_hand():
    # Deadline 10, timeout 100: every request must start within 1 s (the allowance) of its
    # arrival. At t = 1 the two requests of t = 0 (3 s each) have started and run until 3 > 2,
    # so the one arriving at 1 needs a third worker by t = 2.
    wl = workload(ONE, [0.0, 0.0, 1.0, 5.0], [[3.0]] * 4, batch_T=[10.0])
    sim = Simulator(wl, np.array([10.0]), request_allowance_s=1.0)
    assert sim.no_wait_bound(0, [1]) == 3
    assert not sim.run([2]).satisfied and sim.run([3]).satisfied
    # with 2.5 s to wait it may take the first freed worker (t = 3): two workers do
    sim = Simulator(wl, np.array([10.0]), request_allowance_s=2.5)
    assert sim.no_wait_bound(0, [1]) == 2
    assert not sim.run([1]).satisfied and sim.run([2]).satisfied


def test_gallop_probes_near_the_hint_first():
    from distrs.scaling.search import gallop

    for answer in (1, 37, 40, 41, 44, 90, 200):
        probes: list[int] = []

        def sat(n: int, answer: int = answer, probes: list[int] = probes) -> bool:
            probes.append(n)
            return n >= answer

        lo, hi = gallop(sat, 40, 1, 200)
        assert lo <= answer <= hi and sat(hi)
        # whatever is left is bisected; the result is the minimum
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if sat(mid) else (mid + 1, hi)
        assert lo == answer
        if answer in (40, 41):
            assert len(probes) <= 3  # hint, one step, and the answer settled


def test_warm_start_gives_the_same_answer():
    rng = np.random.default_rng(5)
    wl = workload(TWO, np.sort(rng.uniform(0, 200, 400)), rng.uniform(1, 30, (400, 2)))
    cold = search(wl, TWO, 2.0)
    for hint in ({"compile": 3, "execute": 3}, cold.replicas, {"compile": 10_000, "execute": 1}):
        warm = search(wl, TWO, 2.0, warm_start=hint)
        assert warm.replicas == cold.replicas


def test_result_satisfies_and_one_less_does_not_when_monotone():
    rng = np.random.default_rng(8)
    wl = workload(ONE, np.sort(rng.uniform(0, 100, 200)), rng.uniform(1, 10, (200, 1)))
    res = search(wl, ONE, 1.0, policy=QueuePolicy.FCFS, timeout_aware=False)
    n = res.replicas["run"]
    dl, _ = deadlines(wl, 1.0)
    assert simulate(wl, [n], dl, QueuePolicy.FCFS, timeout_aware=False).satisfied
    assert not simulate(wl, [n - 1], dl, QueuePolicy.FCFS, timeout_aware=False).satisfied


def test_no_wait_bound_by_hand():
    # Deadline 10 with a 100 s timeout: every request arriving after −90 must not wait. At t = 1
    # the two requests of t = 0 (ending at 3) still run, so three workers are needed; a request
    # already running until t = 10 holds a fourth.
    wl = workload(ONE, [0.0, 0.0, 1.0, 5.0], [[3.0]] * 4, batch_T=[10.0])
    sim = Simulator(wl, np.array([10.0]))
    assert sim.no_wait_bound(0, [1]) == 3
    assert not sim.run([2]).satisfied and sim.run([3]).satisfied
    running = workload(
        ONE, [0.0, 0.0, 0.0, 1.0, 5.0], [[10.0]] + [[3.0]] * 4, batch_T=[10.0], running=[1, 0, 0, 0, 0]
    )
    sim = Simulator(running, np.array([20.0]))
    assert sim.no_wait_bound(0, [1]) == 4
    assert not sim.run([3]).satisfied and sim.run([4]).satisfied
    assert Simulator(wl, np.array([10.0]), timeout_aware=False).no_wait_bound(0, [1]) == 0


@pytest.mark.parametrize("allowance", [None, 0.5, 2.0])
@pytest.mark.parametrize("check", ["enqueue", "start"])
@pytest.mark.parametrize("seed", range(6))
def test_no_wait_bound_never_cuts_off_a_passing_allocation(seed, check, allowance):
    """Every count below the bound fails, for either stage, with running requests and three
    batches under EBF, under Sec. 5.1's rule and the per-request one (the bound is what the
    search starts its bisection from)."""
    rng = np.random.default_rng(seed)
    n = 60
    running = rng.random(n) < 0.1
    arrival = np.where(running, 0.0, np.sort(rng.uniform(0, 120, n)))
    service = rng.uniform(1, 40, (n, 2)) * (rng.random((n, 2)) < 0.8)
    service[service.sum(axis=1) == 0, 0] = 5.0
    first = np.where(running & (rng.random(n) < 0.5) & (service[:, 1] > 0), 1, 0)
    service[first == 1, 0] = 0.0
    running &= service[np.arange(n), first] > 0
    wl = workload(TWO, arrival, service, batch=rng.integers(0, 3, n), first_stage=first, running=running)
    dl, _ = deadlines(wl, 2.0)
    sim = Simulator(wl, dl, timeout_check=check, request_allowance_s=allowance)
    ub = useful_concurrency(wl)
    for k in (0, 1):
        reps = list(ub)
        bound = sim.no_wait_bound(k, reps)
        for m in range(1, bound):
            reps[k] = m
            assert not sim.run(reps).satisfied, (k, m, bound)


def test_search_with_the_bound_matches_the_brute_force_minimum():
    # One stage, FCFS, timeout-aware: the tail of the batch must not wait, so the bound is set.
    rng = np.random.default_rng(11)
    wl = workload(ONE, np.sort(rng.uniform(0, 150, 120)), rng.uniform(1, 15, (120, 1)))
    dl, _ = deadlines(wl, 1.0)
    sim = Simulator(wl, dl, QueuePolicy.FCFS)
    assert sim.no_wait_bound(0, [1]) > 1
    res = search(wl, ONE, 1.0, policy=QueuePolicy.FCFS)
    brute = next(n for n in range(1, 121) if simulate(wl, [n], dl, QueuePolicy.FCFS).satisfied)
    assert res.replicas["run"] == brute
