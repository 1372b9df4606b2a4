"""The policy interface: ``plan(ctx) -> Decision`` for every policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from distrs.core.history import BatchProfile, RequestProfile
from distrs.scaling.context import ActiveBatch, OracleBatch, PlanContext, PolicyOptions
from distrs.scaling.policies import POLICIES, floor_pending, plan

from .build import TWO


def _profile(task: str, n: int = 200, seed: int = 1, timeouts: int = 0) -> BatchProfile:
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        ex = 60.0 if i < timeouts else float(rng.uniform(1, 5))
        reqs.append(
            RequestProfile(
                float(rng.uniform(30, 200)), {"compile": float(rng.uniform(20, 60)), "execute": ex}
            )
        )
    return BatchProfile(task, "0", 0.0, tuple(reqs), "cuda")


def _ctx(policy: str, **kw) -> PlanContext:
    batches = [
        ActiveBatch("a", "1", "cuda", 200, anchor=1000.0),
        ActiveBatch("b", "1", "cuda", 200, anchor=1050.0),
    ]
    hist = {"a": [_profile("a", seed=1, timeouts=10)], "b": [_profile("b", seed=2, timeouts=10)]}
    base = {"now": 1000.0, "stages": TWO, "batches": batches, "histories": hist, "policy": policy}
    base.update(kw)
    return PlanContext(**base)  # type: ignore[arg-type]


def test_unknown_policy_is_rejected_by_name():
    with pytest.raises(ValueError, match="unknown scaling policy 'nope'"):
        plan(_ctx("nope"))


@pytest.mark.parametrize("policy", ["distrs", "history", "zq-dedicated"])
def test_no_active_batches_means_no_workers(policy):
    d = plan(_ctx(policy, batches=[]))
    assert d.replicas == {"compile": 0, "execute": 0}
    assert d.debug["policy"] == policy and d.debug["elapsed_s"] >= 0


def test_distrs_reports_estimates_and_search_detail():
    d = plan(_ctx("distrs"))
    assert set(d.estimated_completion) == {("a", "1"), ("b", "1")}
    t_a = max(q.earliest_completion() for q in _profile("a", seed=1, timeouts=10).requests)
    assert d.estimated_completion[("a", "1")] == pytest.approx(1000.0 + t_a)
    assert d.debug["satisfiable"] and d.debug["simulations"] > 0
    assert 1 <= d.replicas["execute"] <= d.debug["upper_bounds"]["execute"]


@pytest.mark.parametrize("policy", ["distrs", "history"])
def test_a_stage_cap_bounds_the_searching_policies(policy):
    free = plan(_ctx(policy))
    assert free.replicas["compile"] > 2
    capped = plan(_ctx(policy, stage_max_replicas={"compile": 2}))
    assert capped.replicas["compile"] <= 2
    assert capped.replicas["execute"] >= 1


def test_timeout_awareness_never_gives_fewer_workers_here():
    # same workload; the timeout-aware rule only adds constraints
    dist, hist = plan(_ctx("distrs")), plan(_ctx("history"))
    assert dist.replicas["execute"] >= hist.replicas["execute"]
    assert dist.replicas["compile"] >= hist.replicas["compile"]


def test_zq_dedicated_sums_per_task_pools():
    d = plan(_ctx("zq-dedicated"))
    assert d.dedicated is not None and set(d.dedicated) == {"a", "b"}
    for stage in ("compile", "execute"):
        assert d.replicas[stage] == sum(p[stage] for p in d.dedicated.values())
    # zero queuing per task allocates at least what the shared, queuing plan does
    shared = plan(_ctx("distrs"))
    assert d.replicas["execute"] >= shared.replicas["execute"]


@pytest.mark.parametrize(
    ("opt", "expected"),
    [(3, {"compile": 3, "execute": 3}), ({"execute": 2}, {"compile": 0, "execute": 2})],
)
def test_static(opt, expected):
    d = plan(_ctx("static", options=PolicyOptions(static_replicas=opt)))
    assert d.replicas == expected


def test_ideal_needs_the_oracle():
    with pytest.raises(ValueError, match="oracle"):
        plan(_ctx("ideal"))


def test_ideal_uses_exact_requests():
    ob = OracleBatch(
        key=("a", "1"),
        reward_type="cuda",
        earliest_completion=1010.0,
        arrival=np.array([1000.0, 1000.0, 1000.0]),
        service=np.array([[5.0, 5.0], [5.0, 5.0], [0.0, 0.0]]),
        first_stage=np.zeros(3, dtype=np.int64),
        running=np.zeros(3, dtype=bool),
    )
    d = plan(_ctx("ideal", oracle=[ob], max_extra_delay_s=0.0))
    assert d.replicas == {"compile": 2, "execute": 2}
    assert d.estimated_completion == {("a", "1"): 1010.0}


def test_floor_keeps_one_worker_for_batches_still_arriving():
    c = _ctx("distrs")
    assert floor_pending(c, {"compile": 0, "execute": 0}) == {"compile": 1, "execute": 1}
    done = [ActiveBatch("a", "1", "cuda", 10, anchor=0.0, submitted=10)]
    assert floor_pending(_ctx("distrs", batches=done), {"compile": 0, "execute": 0}) == {
        "compile": 0,
        "execute": 0,
    }


def test_floor_keeps_one_worker_on_the_stages_after_a_request_still_in_flight():
    # All submitted; one request still compiling may go on to execute: keep that GPU.
    running = [
        ActiveBatch("a", "1", "cuda", 10, anchor=0.0, submitted=10, running_elapsed={"compile": [100.0]})
    ]
    assert floor_pending(_ctx("distrs", batches=running), {"compile": 0, "execute": 0}) == {
        "compile": 0,
        "execute": 1,
    }
    # A request queued at the last stage needs nothing after it (its own stage is the plan's).
    last = [ActiveBatch("a", "1", "cuda", 10, anchor=0.0, submitted=10, queued={"execute": 2})]
    assert floor_pending(_ctx("distrs", batches=last), {"compile": 0, "execute": 0}) == {
        "compile": 0,
        "execute": 0,
    }


def test_every_registered_policy_has_a_name_the_cli_accepts():
    assert set(POLICIES) == {"distrs", "history", "zq-dedicated", "ideal", "static"}


def test_zq_dedicated_holds_a_task_pool_for_its_whole_batch():
    # the pool is the peak of the whole estimated batch: the same mid-batch, after half of the
    # requests arrived and some are queued, as at the batch's start
    start = plan(_ctx("zq-dedicated"))
    later_batches = [
        ActiveBatch("a", "1", "cuda", 200, anchor=1000.0, submitted=120, queued={"compile": 30}),
        ActiveBatch("b", "1", "cuda", 200, anchor=1050.0, submitted=60),
    ]
    later = plan(_ctx("zq-dedicated", now=1120.0, batches=later_batches))
    assert later.dedicated == start.dedicated
    # ... and a task without an active batch has no pool
    only_b = plan(_ctx("zq-dedicated", batches=later_batches[1:]))
    assert only_b.dedicated is not None and set(only_b.dedicated) == {"b"}


def test_a_first_batch_learns_from_finished_requests_except_under_zq_dedicated():
    # No history anywhere: the default (a quarter of each timeout) until requests finish.
    first = [ActiveBatch("a", "1", "cuda", 200, anchor=1000.0, submitted=100)]
    done = [{"compile": 2.0, "execute": 0.5}] * 40
    learned = [ActiveBatch("a", "1", "cuda", 200, anchor=1000.0, submitted=100, finished=done)]
    for policy in ("distrs", "history"):
        default = plan(_ctx(policy, batches=first, histories={}))
        short = plan(_ctx(policy, batches=learned, histories={}))
        assert short.debug["sources"] == {"a/1": "in-batch"}
        assert short.replicas["execute"] < default.replicas["execute"]
    # zq-dedicated fixes a task's pool when its batch arrives; the finished ones do not shrink it
    zq_first = plan(_ctx("zq-dedicated", batches=first, histories={}))
    zq_learned = plan(_ctx("zq-dedicated", batches=learned, histories={}))
    assert zq_learned.dedicated == zq_first.dedicated


def test_scale_down_hysteresis_keeps_slack_but_never_holds_back_a_scale_up():
    tight = plan(_ctx("distrs")).replicas
    big = {k: v * 3 for k, v in tight.items()}
    # from a large allocation, no margin: straight down to the tight answer
    assert plan(_ctx("distrs", options=PolicyOptions(warm_start=big))).replicas == tight
    # with a margin: down, but not below the tight answer, and not above where it was
    held = plan(_ctx("distrs", options=PolicyOptions(warm_start=big, scale_down_margin_s=60.0))).replicas
    assert all(tight[k] <= held[k] <= big[k] for k in tight)
    assert any(held[k] > tight[k] for k in tight)
    # from a small allocation the answer goes up to the tight one whatever the margin
    small = {k: 1 for k in tight}
    up = plan(_ctx("distrs", options=PolicyOptions(warm_start=small, scale_down_margin_s=60.0))).replicas
    assert up == tight


def test_scale_up_lookahead_starts_only_the_workers_needed_soon():
    full = plan(_ctx("distrs")).replicas
    # at the hint (now = 1000), batch a's first request comes at >= 1030: with a 20 s window
    # no compile or execute worker is needed yet beyond the floor of one per stage
    soon = plan(_ctx("distrs", options=PolicyOptions(scale_up_lookahead_s=20.0))).replicas
    assert soon == {"compile": 1, "execute": 1}
    # a window past the last request changes nothing
    assert plan(_ctx("distrs", options=PolicyOptions(scale_up_lookahead_s=1e6))).replicas == full
    # a wider window needs more compile workers than a narrow one, never more than the plan
    mid = plan(_ctx("distrs", options=PolicyOptions(scale_up_lookahead_s=100.0))).replicas
    assert 1 < mid["compile"] <= full["compile"]
    # scale-ups only: workers already there are not taken away by the window
    have = {k: v + 5 for k, v in full.items()}
    up_only = PolicyOptions(warm_start=have, scale_up_lookahead_s=20.0, lookahead_scale_down=False)
    assert plan(_ctx("distrs", options=up_only)).replicas == full
    # both ways (the default): idle ones not needed within the window go, down to the floor
    both = PolicyOptions(warm_start=have, scale_up_lookahead_s=20.0)
    assert plan(_ctx("distrs", options=both)).replicas == {"compile": 1, "execute": 1}
    # ... but never a worker that is busy now
    running = [
        ActiveBatch(
            "a", "1", "cuda", 200, anchor=1000.0, submitted=1, running_elapsed={"compile": [1.0] * 7}
        ),
        ActiveBatch("b", "1", "cuda", 200, anchor=1050.0),
    ]
    assert plan(_ctx("distrs", batches=running, options=both)).replicas["compile"] >= 7


def test_a_scale_down_never_retires_busy_workers():
    # 100 compile requests running and 10 queued (110 busy workers' worth): the pool shrinks
    # toward the plan only by the workers idle now, and never grows past where it was
    busy = [
        ActiveBatch(
            "a", "1", "cuda", 200, anchor=1000.0, submitted=200, running_elapsed={"compile": [5.0] * 100}
        ),
        ActiveBatch("b", "1", "cuda", 200, anchor=1050.0, submitted=200, queued={"compile": 10}),
    ]
    tight = plan(_ctx("distrs", now=1100.0, batches=busy)).replicas["compile"]
    assert tight < 110
    for have, expected in ((300, 110), (105, 105), (tight, tight)):
        opts = PolicyOptions(warm_start={"compile": have, "execute": 0})
        assert plan(_ctx("distrs", now=1100.0, batches=busy, options=opts)).replicas["compile"] == expected


def test_spare_workers_in_a_tail_beyond_the_running_requests():
    from distrs.scaling.collect import collect
    from distrs.scaling.policies import spare_in_tails

    # T_b ≈ 1000 + 267 (the profile); at now = 1220 the batch is in its execute tail
    # (from T_b + D − 60) and, with requests still to come, in its compile tail (from T_b + D − 180)
    b = ActiveBatch(
        "a", "1", "cuda", 200, anchor=1000.0, submitted=150, running_elapsed={"execute": [1.0, 2.0]}
    )
    ctx = _ctx("distrs", batches=[b], now=1220.0)
    wl = collect(ctx)
    assert wl.batch_T[0] + 2.0 - 60.0 <= 1220.0
    out = spare_in_tails(ctx, wl, {"compile": 0, "execute": 2})
    assert out == {"compile": 2, "execute": 4}  # running + 2; queued requests are not counted
    one = replace(ctx, options=replace(ctx.options, tail_spares=1))
    assert spare_in_tails(one, wl, {"compile": 0, "execute": 2}) == {"compile": 1, "execute": 3}
    none = replace(ctx, options=replace(ctx.options, tail_spares=0))
    assert spare_in_tails(none, wl, {"compile": 0, "execute": 2}) == {"compile": 0, "execute": 2}
    # a plan that already has the spares idle is left as it is
    assert spare_in_tails(ctx, wl, {"compile": 3, "execute": 5}) == {"compile": 3, "execute": 5}
    # early in the batch (now = 1000) neither stage is in its tail: nothing added
    early = _ctx("distrs", batches=[b], now=1000.0)
    assert spare_in_tails(early, collect(early), {"compile": 0, "execute": 2}) == {"compile": 0, "execute": 2}
    # a batch with everything submitted and nothing before execute can only still reach nothing
    done = ActiveBatch(
        "a", "1", "cuda", 200, anchor=1000.0, submitted=200, running_elapsed={"execute": [1.0]}
    )
    late = _ctx("distrs", batches=[done], now=1250.0)
    assert spare_in_tails(late, collect(late), {"compile": 0, "execute": 1}) == {"compile": 0, "execute": 1}
