"""Pure rules of the Kubernetes actuator: lease decisions and pod deletion costs (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from distrs.actuators.kubernetes import (
    BUSY_POD_COST,
    IDLE_POD_COST,
    PodView,
    deletion_cost_changes,
    is_busy,
    pods_from_list,
)
from distrs.actuators.leader import Action, LeaseRecord, decide, format_microtime, parse_microtime

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rec(holder: str | None, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder, duration, T0, T0, 0, "7")


@pytest.mark.parametrize(
    ("record", "observed_after_s", "expected"),
    [
        (None, None, Action.CREATE),
        (rec("me"), 0, Action.RENEW),
        (rec("me"), 100, Action.RENEW),
        (rec(None), 0, Action.TAKE_OVER),
        (rec("other"), 0, Action.FOLLOW),
        (rec("other"), 15, Action.FOLLOW),  # exactly the duration: still alive
        (rec("other"), 15.5, Action.TAKE_OVER),
        (rec("other", duration=60), 30, Action.FOLLOW),  # the record's own duration wins
        (rec("other"), None, Action.FOLLOW),  # just changed
    ],
)
def test_decide(record: LeaseRecord | None, observed_after_s: float | None, expected: Action) -> None:
    now = T0 + timedelta(seconds=observed_after_s or 0)
    observed_at = None if observed_after_s is None else T0
    assert decide(record, "me", now, observed_at, 15) is expected


def test_microtime_round_trip() -> None:
    t = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    assert format_microtime(t) == "2026-03-04T05:06:07.890123Z"
    assert parse_microtime(format_microtime(t)) == t
    assert parse_microtime("garbage") is None and parse_microtime(None) is None


@pytest.mark.parametrize(
    ("pods", "busy", "expected"),
    [
        (
            [PodView("w-a", True, None), PodView("w-b", True, None)],
            {"w-b"},
            {"w-a": IDLE_POD_COST, "w-b": BUSY_POD_COST},
        ),
        ([PodView("w-a", True, IDLE_POD_COST)], set(), {}),  # already right
        ([PodView("w-a", True, IDLE_POD_COST)], {"w-a-1234"}, {"w-a": BUSY_POD_COST}),  # hostname-pid ids
        ([PodView("w-a", True, BUSY_POD_COST)], {"w-ab"}, {"w-a": IDLE_POD_COST}),  # no prefix confusion
    ],
)
def test_deletion_cost_changes(pods: list[PodView], busy: set[str], expected: dict[str, int]) -> None:
    assert deletion_cost_changes(pods, busy) == expected


def test_pods_from_list_skips_terminating_and_reads_cost() -> None:
    listing = {
        "items": [
            {
                "metadata": {
                    "name": "a",
                    "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-100"},
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            {"metadata": {"name": "b", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
            {"metadata": {"name": "c", "annotations": {"controller.kubernetes.io/pod-deletion-cost": "x"}}},
        ]
    }
    assert pods_from_list(listing) == [PodView("a", True, -100), PodView("c", False, None)]
    assert is_busy("a", {"a"}) and not is_busy("a", {"ab"})
