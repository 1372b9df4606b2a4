"""The exec timer's report (sandbox/exec_timer.py): only a whole, plausible time is charged."""

from __future__ import annotations

import pytest

from distrs.sandbox.exec_timer import program_time


@pytest.mark.parametrize(
    ("report", "wall", "want"),
    [
        (b"S250000000\n", 1.0, 0.25),
        (b"S1000000000\n", 1.0, 1.0),
        (b"S1000000001\n", 1.0, None),  # longer than the jail's own wall time
        (b"S0\n", 1.0, None),
        (b"S\n", 1.0, None),  # the program stopped the timer before it reported
        (b"S250000000", 1.0, None),  # cut short
        (b"S25x000000\n", 1.0, None),
        (b"S1\n250000000\n", 1.0, None),  # something else wrote into the pipe
        (b"U", 1.0, None),  # run untimed
        (b"", 1.0, None),
        (b"S" + b"1" * 70 + b"\n", 1e80, None),
        (b"250000000\n", 1.0, None),
    ],
)
def test_report(report: bytes, wall: float, want: float | None) -> None:
    assert program_time(report, wall) == want
