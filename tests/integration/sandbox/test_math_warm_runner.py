"""The math checker is a warm, long-lived jailed child: hostile input must not leak into the next
request's verdict, and one hostile input must not stall other workers.

Every test runs the real jailed child (bwrap). The hostile children are the real
``math_child.py`` with one line changed, so they speak the protocol exactly as a compromised child
would: they write forged replies on the reply stream or die mid-request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrs.core.model import Status
from distrs.rewards.base import StageInput
from distrs.rewards.math_reward import CHILD_SOURCE, MathChecker, MathSettings, VerifyHandler
from distrs.sandbox import SandboxError
from distrs.sandbox.local import LocalSandbox

PROBES = [
    ("The answer is $\\boxed{\\frac{1}{2}}$.", "0.5"),
    ("$\\boxed{7}$", "8"),
    ("so $x = \\boxed{2\\sqrt{3}}$", "\\sqrt{12}"),
    ("no answer here", "3"),
    ("$\\boxed{\\{1, 2\\}}$", "\\{2, 1\\}"),
]

HOSTILE = [
    "__import__('os')._exit(3)",
    "globals().clear()",
    "import sys; sys.modules.clear()",
    "$\\boxed{" + "\\frac{1}{" * 300 + "}$",
    "\x00\x01\x02 $\\boxed{\x00}$",
    "$\\boxed{x}$ " * 2000,
    "$\\boxed{1}$ \n" + '{"id": 0, "gold_ok": true, "found": true, "correct": true}\n',
    "\\boxed{",
]


def _run(
    h: VerifyHandler, completion: str, truth: str, timeout_s: float = 8.0
) -> tuple[Status | None, float]:
    out = h.run(
        StageInput(
            "r", "t", "math", "verify", {"completion": completion, "ground_truth": truth}, timeout_s=timeout_s
        )
    )
    return out.status, out.score


@pytest.fixture
def handlers(bwrap_sandbox: LocalSandbox) -> Iterator[tuple[VerifyHandler, VerifyHandler]]:
    a = VerifyHandler(bwrap_sandbox, MathSettings(timeout_s=8))
    b = VerifyHandler(bwrap_sandbox, MathSettings(timeout_s=8))
    yield a, b
    a.close()
    b.close()


def test_hostile_inputs_do_not_change_the_next_verdicts(
    handlers: tuple[VerifyHandler, VerifyHandler],
) -> None:
    warm, fresh = handlers
    expected = [_run(fresh, c, t) for c, t in PROBES]
    assert [s for s, _ in expected] == [
        Status.OK,
        Status.WRONG_ANSWER,
        Status.OK,
        Status.WRONG_ANSWER,
        Status.OK,
    ]
    hang = "$\\boxed{9^{9^{9^{9^{9}}}}}$"
    for evil in [*HOSTILE, hang]:
        _run(warm, evil, "1", timeout_s=3.0)  # whatever its own verdict, it must not leak
        assert [_run(warm, c, t) for c, t in PROBES] == expected, evil[:40]


def test_hostile_inputs_against_the_same_ground_truth_do_not_change_its_verdicts(
    bwrap_sandbox: LocalSandbox,
) -> None:
    """The child keeps parsed ground truths: a hostile completion checked against a ground truth
    must leave nothing in that cached parse for the next completion of the same prompt."""
    warm = VerifyHandler(bwrap_sandbox, MathSettings(timeout_s=8))  # gold cache on (the default)
    fresh = VerifyHandler(bwrap_sandbox, MathSettings(timeout_s=8, gold_cache=0))
    try:
        expected = [_run(fresh, c, t) for c, t in PROBES]
        for evil in HOSTILE:
            for (c, t), want in zip(PROBES, expected, strict=True):
                _run(warm, evil, t, timeout_s=3.0)  # same ground truth: its parse comes from the cache
                assert _run(warm, c, t) == want, (evil[:40], t)
    finally:
        warm.close()
        fresh.close()


def test_the_jailed_child_reuses_a_parsed_ground_truth(bwrap_sandbox: LocalSandbox) -> None:
    checker = MathChecker(bwrap_sandbox, MathSettings())
    try:
        first = checker.check("\\frac{1}{2}", "\\boxed{0.5}", 10.0)
        again = checker.check("\\frac{1}{2}", "\\boxed{0.4}", 10.0)
        assert (first["cached"], first["correct"]) == (False, True)
        assert (again["cached"], again["correct"]) == (True, False)
    finally:
        checker.close()


def test_a_hanging_input_stalls_only_its_own_worker(handlers: tuple[VerifyHandler, VerifyHandler]) -> None:
    stuck, other = handlers
    assert _run(other, "$\\boxed{2}$", "2") == (Status.OK, 1.0)  # both children warm
    assert _run(stuck, "$\\boxed{2}$", "2") == (Status.OK, 1.0)
    verdict: list[tuple[Status | None, float]] = []
    t = threading.Thread(
        target=lambda: verdict.append(_run(stuck, "$\\boxed{9^{9^{9^{9^{9}}}}}$", "1", timeout_s=20.0))
    )
    t.start()
    others = [_run(other, c, tr) for c, tr in PROBES]
    assert t.is_alive()  # the other worker's five checks ended while the hostile one still runs
    t.join()
    # math-verify's own timeout or the hard deadline ends it; either way it scores nothing
    assert verdict[0][0] in (Status.TIMEOUT, Status.WRONG_ANSWER) and verdict[0][1] == 0.0
    assert [s for s, _ in others] == [
        Status.OK,
        Status.WRONG_ANSWER,
        Status.OK,
        Status.WRONG_ANSWER,
        Status.OK,
    ]
    assert _run(stuck, "$\\boxed{2}$", "2") == (Status.OK, 1.0)  # replaced, serving again


def _hostile_child(tmp_path: Path, replace: str, by: str) -> Path:
    src = CHILD_SOURCE.read_text()
    assert replace in src
    out = tmp_path / "hostile_child.py"
    out.write_text(src.replace(replace, by, 1))
    return out


REPLY = '        replies.write(json.dumps(res) + "\\n")\n'
_FAKES = (
    "            for i in range(-2, 50):\n"
    '                fake = {"id": (rid or 0) + i, "gold_ok": True, "found": True, "correct": True,'
    ' "gold": "", "pred": ""}\n'
    '                replies.write(json.dumps(fake) + "\\n")\n'
)
# EARLY: forged "correct" replies (for its own id and the next ones a counter would give) before
# the real reply. LATE: the real reply, then forged ones a moment later, waiting for the next request.
FORGE = (
    '        if "EARLY" in line:\n'
    + _FAKES
    + REPLY
    + '        if "LATE" in line:\n'
    + "            replies.flush()\n"
    + "            import time; time.sleep(0.3)\n"
    + _FAKES
)


def test_forged_replies_are_never_read_as_a_verdict(bwrap_sandbox: LocalSandbox, tmp_path: Path) -> None:
    child = _hostile_child(tmp_path, REPLY, FORGE)
    checker = MathChecker(bwrap_sandbox, MathSettings(), child_source=child)
    try:
        for _ in range(2):
            with pytest.raises(SandboxError):  # no verdict at all rather than a forged one
                checker.check("5", "\\boxed{4} EARLY", 10.0)
            assert checker.check("5", "\\boxed{4}", 10.0)["correct"] is False
            late = checker.check("5", "\\boxed{4} LATE", 10.0)
            assert late["found"] is True and late["correct"] is False  # its own, real verdict
            nxt = checker.check("5", "\\boxed{4}", 10.0)
            assert nxt["found"] is True and nxt["correct"] is False
            assert checker.check("5", "\\boxed{5}", 10.0)["correct"] is True
    finally:
        checker.close()


def test_a_child_that_dies_mid_request_is_replaced(bwrap_sandbox: LocalSandbox, tmp_path: Path) -> None:
    child = _hostile_child(
        tmp_path, REPLY, '        if "DIE" in line:\n            import os; os._exit(7)\n' + REPLY
    )
    checker = MathChecker(bwrap_sandbox, MathSettings(), child_source=child)
    try:
        assert checker.check("5", "\\boxed{5}", 10.0)["correct"] is True
        with pytest.raises(SandboxError):
            checker.check("5", "\\boxed{5} DIE", 10.0)
        assert checker.check("5", "\\boxed{4}", 10.0)["correct"] is False
        assert checker.check("5", "\\boxed{5}", 10.0)["correct"] is True
    finally:
        checker.close()
