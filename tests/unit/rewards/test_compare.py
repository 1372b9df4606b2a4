"""Output comparison modes: exact, tokens, float tolerance."""

from __future__ import annotations

import pytest

from distrs.rewards.compare import Compare, floats_match, outputs_match


@pytest.mark.parametrize(
    ("got", "want", "mode", "ok"),
    [
        ("3\n", "3", Compare.EXACT, True),
        ("3\r\n", "3\n", Compare.EXACT, True),
        ("1  2\n", "1 2\n", Compare.EXACT, False),
        ("1\n2\n", "1 2", Compare.EXACT, False),
        ("1  2\n", "1 2\n", Compare.TOKENS, True),
        ("1\n2\n", "1 2", Compare.TOKENS, True),
        ("1 2 3", "1 2", Compare.TOKENS, False),
        ("", "", Compare.TOKENS, True),
        ("0.3333333", "0.33333333", Compare.FLOAT, True),
        ("0.34", "0.33", Compare.FLOAT, False),
        ("1e9", "1000000000.5", Compare.FLOAT, True),  # relative for large values
        ("YES 1.0", "YES 1", Compare.FLOAT, True),
        ("NO 1.0", "YES 1", Compare.FLOAT, False),
        ("1.0", "1", Compare.TOKENS, False),
    ],
)
def test_outputs_match(got: str, want: str, mode: Compare, ok: bool) -> None:
    assert outputs_match(got, want, mode) is ok


def test_float_tolerance_is_configurable_and_handles_specials() -> None:
    assert outputs_match("1.05", "1.0", Compare.FLOAT, tol=0.1)
    assert not outputs_match("1.05", "1.0", Compare.FLOAT, tol=0.01)
    assert floats_match("nan", "nan", 1e-6)
    assert not floats_match("nan", "1", 1e-6)
    assert floats_match("inf", "inf", 1e-6)
    assert not floats_match("inf", "1e308", 1e-6)


def test_json_compare() -> None:
    from distrs.rewards.compare import Compare, outputs_match

    assert outputs_match("[1.0, 2]\n", "[1, 2]", Compare.JSON)
    assert outputs_match('{"a": [true, null]}', '{"a":[true,null]}', Compare.JSON)
    assert not outputs_match("[1, 2]", "[2, 1]", Compare.JSON)
    assert not outputs_match("true", "1", Compare.JSON)  # a bool is not a number
    assert outputs_match("not json  here", "not json here", Compare.JSON)  # falls back to tokens
