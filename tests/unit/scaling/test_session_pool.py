"""Sizing the session pool (pure): room for every session, exec slots for the busy ones, held
back over a window, never below the workers holding sessions; spare jails per burst."""

from __future__ import annotations

import pytest

from distrs.scaling.session_pool import (
    PoolDemand,
    PoolShape,
    largest_burst,
    pool_size,
    spare_target,
    trim,
    wanted,
)

SHAPE = PoolShape(per_worker=100, exec_slots=16, headroom=0.25, min_workers=0, max_workers=8, window_s=60.0)


@pytest.mark.parametrize(
    ("open_", "opening", "busy", "want"),
    [
        (0, 0, 0, 0),  # nothing open: the pool may go to zero
        (0, 1, 0, 1),  # a create waiting: start a worker for it
        (80, 0, 0, 1),  # 80 + 20 headroom fit one worker
        (81, 0, 0, 2),  # 81 + 21 do not
        (10, 0, 40, 3),  # 40 sessions busy at once need 40 exec slots
        (200, 40, 0, 3),  # 240 + 50 headroom
    ],
)
def test_wanted(open_: int, opening: int, busy: int, want: int) -> None:
    assert wanted(PoolDemand(0.0, open_, opening, busy), SHAPE) == want


def test_scale_down_waits_for_the_window_and_never_goes_below_holding_workers() -> None:
    burst = PoolDemand(0.0, open=20, opening=0, busy_sessions=64)
    quiet = PoolDemand(30.0, open=20, opening=0, busy_sessions=0, holding=1)
    assert pool_size([burst, quiet], SHAPE) == 4  # the step's burst is 30 s old: held
    later = PoolDemand(61.0, open=20, opening=0, busy_sessions=0, holding=1)
    assert pool_size([burst, quiet, later], SHAPE) == 1
    spread = PoolDemand(62.0, open=2, opening=0, busy_sessions=0, holding=3)
    assert pool_size([spread], SHAPE) == 3  # three workers hold sessions: none of them may go
    assert pool_size([], SHAPE) == 0
    assert pool_size([PoolDemand(0.0, 5000, 0, 0)], SHAPE) == 8  # within max_workers
    assert trim([burst, quiet, later], 61.0, 60.0) == [quiet, later]


def test_spare_target_follows_the_largest_burst_within_the_room() -> None:
    step = [100.0 + i * 0.01 for i in range(120)]
    assert largest_burst(step, 110.0, 120.0, 10.0) == 120
    two_steps = step + [150.0 + i * 0.01 for i in range(120)]
    assert largest_burst(two_steps, 160.0, 120.0, 10.0) == 120  # not 240: the next step asks for 120
    assert spare_target(two_steps, 160.0, 120.0, 2, room=200) == 120
    assert spare_target(two_steps, 160.0, 120.0, 2, room=50) == 50
    assert spare_target(two_steps, 400.0, 120.0, 2, room=200) == 2  # bursts forgotten: the minimum
    assert spare_target([], 0.0, 120.0, 2, room=0) == 0
