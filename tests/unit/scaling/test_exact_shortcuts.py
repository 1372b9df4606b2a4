"""The faster stand-ins the planner's search uses give exactly what they stand in for."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distrs.scaling.simulate import stable_argsort
from distrs.scaling.workload import peak_overlap

FAST = settings(max_examples=200, deadline=None)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(0, 300), st.integers(0, 3), st.booleans())
def test_stable_argsort_is_numpys_stable_argsort(seed, n, digits, with_inf):
    rng = np.random.default_rng(seed)
    x = np.round(rng.uniform(-20, 20, n), digits)  # few digits: many ties
    if with_inf and n:
        x[rng.integers(0, n, max(1, n // 10))] = rng.choice([np.inf, -np.inf])
    assert np.array_equal(stable_argsort(x), np.argsort(x, kind="stable"))


def test_stable_argsort_with_nans_falls_back():
    x = np.array([2.0, np.nan, 1.0, np.nan, 1.0])
    assert np.array_equal(stable_argsort(x), np.argsort(x, kind="stable"))


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(0, 200), st.booleans())
def test_peak_overlap_is_the_event_sweep(seed, n, ties):
    rng = np.random.default_rng(seed)
    begin = rng.uniform(0, 50, n)
    length = rng.exponential(5, n) * (rng.random(n) > 0.1)  # some zero-length
    if ties:
        begin, length = np.round(begin), np.round(length)
    assert peak_overlap(begin, begin + length) == event_sweep(begin, begin + length)


def event_sweep(begin: np.ndarray, end: np.ndarray) -> int:
    """The most intervals open at once, written plainly: +1 / −1 events in time order, ends
    first at equal times."""
    if begin.size == 0:
        return 0
    times = np.concatenate([begin, end])
    delta = np.concatenate([np.ones(begin.size), -np.ones(end.size)])
    return int(np.cumsum(delta[np.lexsort((delta, times))]).max())
