"""The execute stage's timing arithmetic: inner times for honest calls, the host's clock for
calls whose work ran outside their own measurement."""

from __future__ import annotations

from distrs.rewards.kernelbench.timing import Call, charge, digest_agrees, stats


def ref_calls(inner: float = 1.0, gaps: tuple[float, ...] = (0.10, 0.12, 0.11, 0.13, 0.10)) -> list[Call]:
    return [Call(inner, inner + g) for g in gaps]


def test_honest_candidate_is_charged_its_own_times() -> None:
    cand = [Call(0.5, 0.5 + g) for g in (0.11, 0.12, 0.10, 0.14, 0.11)]
    c = charge(ref_calls(), cand)
    assert not c.hidden and c.cand_ms == [0.5] * 5 and c.ref_ms == [1.0] * 5
    assert abs(c.overhead_ms - 0.11) < 1e-9


def test_work_outside_the_events_is_charged_the_hosts_clock() -> None:
    cand = [Call(0.0, 5.11) for _ in range(5)]  # a patched timer says 0; the host saw 5 ms
    c = charge(ref_calls(), cand)
    assert c.hidden and all(abs(t - 5.0) < 1e-9 for t in c.cand_ms)


def test_a_noisy_reference_widens_the_margin() -> None:
    noisy = ref_calls(gaps=(0.1, 3.0, 0.2, 2.5, 0.15, 4.0, 0.3, 2.0))
    cand = [Call(1.0, 1.0 + g) for g in (0.2, 2.0, 0.3, 3.5)]
    assert not charge(noisy, cand).hidden


def test_impossible_readings_are_void() -> None:
    cand = [Call(-1.0, 2.11), Call(9.0, 2.11), Call(-1.0, 2.11)]  # negative, longer than the clock
    c = charge(ref_calls(), cand)
    assert c.hidden and all(abs(t - 2.0) < 1e-9 for t in c.cand_ms)


def test_stats_are_kernelbench_shaped() -> None:
    s = stats([1.0, 2.0, 3.0], "NVIDIA H100", "cuda")
    assert s == {
        "mean": 2.0,
        "std": 0.816,
        "min": 1.0,
        "max": 3.0,
        "num_trials": 3,
        "hardware": "NVIDIA H100",
        "device": "cuda",
    }


def test_digests_of_allclose_outputs_agree_and_others_do_not() -> None:
    assert digest_agrees(100.0005, 100.0, ref_scale=200.0, n_elements=1000, atol=1e-6, rtol=1e-5)
    assert not digest_agrees(101.0, 100.0, ref_scale=200.0, n_elements=1000, atol=1e-6, rtol=1e-5)
