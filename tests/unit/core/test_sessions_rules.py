"""The pure rules of sessions: when one expires, what an ended one answers, op deadlines."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from distrs.core.sessions import (
    EndReason,
    Language,
    OpKind,
    SessionLimits,
    SessionRecord,
    SessionState,
    ended_answer,
    expiry,
    op_deadline,
)


def rec(**kw: object) -> SessionRecord:
    base: dict[str, object] = dict(
        session_id="s",
        tenant="t",
        task="t/a",
        language=Language.PYTHON,
        state=SessionState.OPEN,
        created_at=100.0,
        last_used_at=100.0,
        idle_timeout_s=60.0,
        max_lifetime_s=600.0,
    )
    base.update(kw)
    return SessionRecord.model_validate(base)


@pytest.mark.parametrize(
    ("kw", "now", "want"),
    [
        ({}, 150.0, None),
        ({}, 161.0, EndReason.IDLE),
        ({"busy": 1}, 161.0, None),  # a session with a call in flight is not idle
        ({"last_used_at": 650.0}, 701.0, EndReason.LIFETIME),
        ({"busy": 2, "last_used_at": 690.0}, 701.0, EndReason.LIFETIME),  # lifetime ends it in use too
        ({"state": SessionState.CLOSED}, 10_000.0, None),
        ({"state": SessionState.OPENING}, 161.0, EndReason.IDLE),
    ],
)
def test_expiry(kw: dict[str, object], now: float, want: EndReason | None) -> None:
    assert expiry(rec(**kw), now) is want


@pytest.mark.parametrize(
    ("reason", "status", "code"),
    [
        (EndReason.DELETED, 404, "session_deleted"),
        (EndReason.IDLE, 410, "session_expired"),
        (EndReason.LIFETIME, 410, "session_expired"),
        (EndReason.LOST, 410, "session_lost"),
        (EndReason.DRAINED, 410, "session_lost"),
        (EndReason.LIMIT, 410, "session_limit_exceeded"),
        (EndReason.CREATE_FAILED, 410, "session_create_failed"),
        (EndReason.CREATE_TIMEOUT, 410, "session_create_failed"),
    ],
)
def test_every_end_reason_has_its_own_answer(reason: EndReason, status: int, code: str) -> None:
    got = ended_answer(reason)
    assert got[:2] == (status, code) and got[2]


def test_op_deadline_adds_the_exec_timeout_and_the_grace() -> None:
    assert op_deadline(OpKind.EXEC, {"timeout_s": 10}, 5.0, 3.0) == 18.0
    assert op_deadline(OpKind.STATE, {"timeout_s": 10}, 5.0, 3.0) == 8.0
    assert op_deadline(OpKind.TEST, {"timeout_s": 2, "tests": [1, 2, 3]}, 0.0, 1.0) == 7.0


def test_limits_refuse_unknown_fields_and_nonsense() -> None:
    with pytest.raises(ValidationError):
        SessionLimits.model_validate({"memory_mb": 1})
    with pytest.raises(ValidationError):
        SessionLimits.model_validate({"cpu": 3})


def test_view_shows_when_it_expires() -> None:
    v = rec(last_used_at=500.0).view("a")
    assert v["expires_at"] == 560.0 and v["task"] == "a" and v["state"] == "open"
    assert rec(last_used_at=690.0).view("a")["expires_at"] == 700.0
