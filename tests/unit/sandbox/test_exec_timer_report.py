"""The exec timer (sandbox/exec_timer.py): only a whole, plausible report is charged; an
interpreter that cannot be found takes the timer out for a while."""

from __future__ import annotations

import pytest

from distrs.sandbox import Mounts
from distrs.sandbox.exec_timer import RETRY_AFTER_S, ExecTimer, program_time


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


def test_an_interpreter_that_cannot_be_asked_is_asked_again_only_after_a_while() -> None:
    now, asked = [0.0], [0]

    def locate() -> tuple[str, Mounts]:
        asked[0] += 1
        if now[0] < 2 * RETRY_AFTER_S:
            raise OSError("no such interpreter")
        return "/usr/bin/python3", Mounts(ro_paths=("/opt/py",))

    timer = ExecTimer(locate, own_pid_namespace=True, clock=lambda: now[0])
    assert not timer.usable() and "no such interpreter" in (timer.broken or "")
    now[0] = RETRY_AFTER_S - 1
    assert not timer.usable() and asked[0] == 1  # taken out: not asked per request
    now[0] = 2 * RETRY_AFTER_S
    assert timer.usable() and asked[0] == 2 and timer.mounts.ro_paths == ("/opt/py",)
    assert timer.usable() and asked[0] == 2  # found once, kept
    assert timer.argv(5, ["./b"])[:3] == ["/usr/bin/python3", "-I", "-S"]
