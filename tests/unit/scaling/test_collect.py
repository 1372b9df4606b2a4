"""Alg. 2 (request collection) and the first-batch fallback."""

from __future__ import annotations

import numpy as np
import pytest

from distrs.core.history import BatchProfile, RequestProfile
from distrs.scaling.collect import collect
from distrs.scaling.context import ActiveBatch, PlanContext, PolicyOptions
from distrs.scaling.fallback import choose_profile

from .build import TWO


def profile(
    task: str, rows: list[tuple[float, float, float]], anchor: float = 0.0, rt: str = "cuda"
) -> BatchProfile:
    return BatchProfile(
        task, "prev", anchor, tuple(RequestProfile(r, {"compile": c, "execute": e}) for r, c, e in rows), rt
    )


PROF = profile("a", [(10, 5, 1), (20, 5, 2), (30, 6, 0), (40, 0, 0)])  # last one: gen failed


def ctx(batches, histories=None, now=115.0, **kw) -> PlanContext:
    return PlanContext(
        now=now,
        stages=TWO,
        batches=batches,
        histories={"a": [PROF]} if histories is None else histories,
        **kw,
    )


def batch(**kw) -> ActiveBatch:
    base = {"task": "a", "batch_id": "b1", "reward_type": "cuda", "size": 4, "anchor": 100.0}
    base.update(kw)
    return ActiveBatch(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("submitted", "arrivals"),
    [
        (1, [120.0, 130.0]),  # r=20,30,40 still to come (r=40 needs no worker)
        (2, [130.0]),  # batch is ahead: only the last (size − submitted) = 2 of them
        (3, []),
        (4, []),  # everything submitted
        (0, [115.0, 120.0, 130.0]),  # behind: the missing r=10 follows from now on
    ],
)
def test_future_requests(submitted, arrivals):
    wl = collect(ctx([batch(submitted=submitted)]))
    assert sorted(wl.arrival.tolist()) == arrivals
    assert not wl.running.any()


def test_estimated_completion_is_profile_T_shifted_to_anchor():
    wl = collect(ctx([batch(submitted=4)]))
    assert wl.batch_T.tolist() == [100.0 + 40.0]  # max(r + Σs) = max(16, 27, 36, 40)


def test_queued_requests_are_sampled_from_profile_requests_reaching_the_stage():
    wl = collect(ctx([batch(submitted=4, queued={"execute": 5})]))
    assert wl.n == 5
    assert (wl.arrival == 115.0).all() and (wl.first_stage == 1).all()
    assert (wl.service[:, 0] == 0).all()  # compile already done
    assert set(wl.service[:, 1].tolist()) <= {1.0, 2.0}


def test_running_requests_are_conditioned_on_elapsed():
    wl = collect(ctx([batch(submitted=4, running_elapsed={"compile": [5.5, 7.0]})]))
    rem = wl.service[:, 0]
    assert wl.running.all()
    # s > 5.5 among {5, 5, 6}: only 6 → 0.5 left (then its execute time, 0)
    assert rem[0] == pytest.approx(0.5) and wl.service[0, 1] == 0.0
    # nothing ran 7 s: assumed to run to the 120 s timeout
    assert rem[1] == pytest.approx(113.0)


def test_collection_is_reproducible():
    c = ctx([batch(submitted=4, queued={"compile": 20})])
    assert np.array_equal(collect(c).service, collect(c).service)


def test_multi_tenant_every_active_batch():
    other = profile("b", [(5, 3, 3)])
    c = ctx(
        [batch(submitted=1), batch(task="b", batch_id="x", size=1, anchor=110.0)],
        histories={"a": [PROF], "b": [other]},
        options=PolicyOptions(t_estimate_batches=1),  # each task's own T only
    )
    wl = collect(c)
    assert wl.batch_keys == [("a", "b1"), ("b", "x")]
    assert sorted(wl.batch.tolist()) == [0, 0, 1]
    assert wl.batch_T.tolist() == [140.0, 121.0]


def test_fallback_order_own_then_pooled_then_default():
    old = profile("b", [(1, 1, 1)], anchor=10.0)
    new = profile("c", [(1, 1, 1)], anchor=50.0)
    other_type = profile("d", [(1, 1, 1)], anchor=99.0, rt="math")
    hist = {"a": [PROF], "b": [old], "c": [new], "d": [other_type]}
    assert choose_profile("a", "cuda", hist, {}) == (PROF, "own")
    assert choose_profile("z", "cuda", hist, {}) == (new, "pooled:c")
    assert choose_profile("z", "python", hist, {}) == (None, "default")


def test_default_profile_is_used_without_any_history():
    opts = PolicyOptions(default_first_s=30.0, default_span_s=150.0, default_stage_fraction=0.5)
    wl = collect(ctx([batch(size=5, anchor=100.0)], histories={}, now=100.0, options=opts))
    assert wl.debug["sources"] == {"a/b1": "default"}
    assert wl.arrival.tolist() == [130.0, 160.0, 190.0, 220.0, 250.0]
    assert (wl.service == [60.0, 30.0]).all()
    assert wl.batch_T.tolist() == [100.0 + 150.0 + 90.0]


def test_a_first_batch_learns_stage_times_from_finished_requests():
    opts = PolicyOptions(default_first_s=30.0, default_span_s=150.0, learn_min_finished=3)
    few = [{"compile": 4.0, "execute": 1.0}] * 2
    # Too few finished: the default stands.
    wl = collect(ctx([batch(size=5, finished=few)], histories={}, now=100.0, options=opts))
    assert wl.debug["sources"] == {"a/b1": "default"}
    # Enough, pooled over the active first batches of the same reward type (not other types).
    done = [{"compile": 4.0, "execute": 1.0}, {"compile": 8.0}]
    other = batch(task="m", batch_id="x", reward_type="math", finished=[{"compile": 99.0}] * 5)
    batches = [batch(size=5, finished=done), batch(task="c", batch_id="b2", finished=done), other]
    wl = collect(ctx(batches, histories={}, now=100.0, options=opts), batches[:1])
    assert wl.debug["sources"] == {"a/b1": "in-batch"}
    assert wl.arrival.tolist() == [130.0, 160.0, 190.0, 220.0, 250.0]  # the default's arrivals
    assert wl.service.tolist() == [[4.0, 1.0], [8.0, 0.0], [4.0, 1.0], [8.0, 0.0], [4.0, 1.0]]


def test_a_learning_first_batch_keeps_its_own_arrival_pace():
    # 2 of 5 requests came in the 40 s since the anchor: the last is due at 40 * 5 / 2 = 100 s,
    # not at the default's 150 s; arrivals spread evenly from the default's first (30 s) to it.
    opts = PolicyOptions(default_first_s=30.0, default_span_s=150.0, learn_min_finished=2)
    done = [{"compile": 4.0, "execute": 1.0}] * 2
    wl = collect(ctx([batch(size=5, submitted=2, finished=done)], histories={}, now=140.0, options=opts))
    assert wl.debug["sources"] == {"a/b1": "in-batch"}
    assert wl.arrival.tolist() == [165.0, 182.5, 200.0]  # the 3 still to come
    assert wl.batch_T.tolist() == [100.0 + 100.0 + 5.0]


def test_running_request_longer_than_the_whole_profile_goes_on_like_its_longest():
    # Every profile compile ran at most 6 s; a compile already at 9 s is planned to run to its
    # timeout and then to execute like the longest compile (6 s, then 3 s of execute).
    prof = profile("a", [(10, 5, 1), (20, 5, 2), (30, 6, 3), (40, 0, 0)])
    wl = collect(ctx([batch(submitted=4, running_elapsed={"compile": [9.0]})], histories={"a": [prof]}))
    assert wl.running.tolist() == [True]
    timeout = TWO[0].timeout_s
    assert wl.service.tolist() == [[timeout - 9.0, 3.0]]


def test_T_estimate_is_the_earliest_of_the_recent_batches():
    from distrs.core.history import BatchProfile, RequestProfile
    from distrs.scaling.collect import collect
    from distrs.scaling.context import ActiveBatch, PlanContext, PolicyOptions

    from .build import TWO

    def prof(last_r: float) -> BatchProfile:
        reqs = (
            RequestProfile(10.0, {"compile": 5.0}),
            RequestProfile(last_r, {"compile": 5.0, "execute": 1.0}),
        )
        return BatchProfile("t", "x", 0.0, reqs, "cuda")

    hist = {"t": [prof(300.0), prof(200.0), prof(400.0)]}  # T = 306, 206, 406 after their anchors
    batch = ActiveBatch("t", "9", "cuda", 2, anchor=1000.0)
    for k, expected in ((1, 1406.0), (2, 1206.0), (5, 1206.0)):
        ctx = PlanContext(
            now=1000.0,
            stages=TWO,
            batches=[batch],
            histories=hist,
            options=PolicyOptions(t_estimate_batches=k),
        )
        assert collect(ctx).batch_T.tolist() == [expected]


def test_a_young_task_counts_other_tasks_latest_T_too():
    from distrs.core.history import BatchProfile, RequestProfile
    from distrs.scaling.collect import collect
    from distrs.scaling.context import ActiveBatch, PlanContext

    from .build import TWO

    def prof(task: str, last_r: float, anchor: float = 0.0, rt: str = "cuda") -> BatchProfile:
        reqs = (RequestProfile(10.0, {"compile": 5.0}), RequestProfile(last_r, {"compile": 5.0}))
        return BatchProfile(task, "x", anchor, reqs, rt)

    batch = ActiveBatch("t", "2", "cuda", 2, anchor=1000.0)
    # t has one batch (T = 405); u's latest (T = 305) counts, u's older one and v (another
    # reward type) do not
    hist = {
        "t": [prof("t", 400.0)],
        "u": [prof("u", 100.0, anchor=0.0), prof("u", 300.0, anchor=500.0)],
        "v": [prof("v", 50.0, rt="python")],
    }
    ctx = PlanContext(now=1000.0, stages=TWO, batches=[batch], histories=hist)
    assert collect(ctx).batch_T.tolist() == [1305.0]
    # with five of its own, only its own count
    own = {**hist, "t": [prof("t", 400.0)] * 5}
    assert collect(PlanContext(now=1000.0, stages=TWO, batches=[batch], histories=own)).batch_T.tolist() == [
        1405.0
    ]
