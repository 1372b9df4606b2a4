"""Judging a program's stdout against the expected output, online-judge style.

- ``exact``: equal after normalising line endings (CRLF to LF) and trailing whitespace at the
  very end (a missing final newline is not an error);
- ``tokens``: equal sequences of whitespace-separated tokens;
- ``float``: token by token; tokens that both parse as floats match when
  ``|a - b| <= tol * max(1, |b|)`` (absolute near zero, relative for large values), other
  tokens must be equal;
- ``json``: both parse as JSON and are equal values (numbers within the float tolerance, so
  ``[1.0, 2]`` matches ``[1, 2]``); output that is not JSON falls back to ``tokens``. Call-based
  tests (``fn_name``) print the function's return value as JSON and compare this way.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any


class Compare(StrEnum):
    EXACT = "exact"
    TOKENS = "tokens"
    FLOAT = "float"
    JSON = "json"


DEFAULT_FLOAT_TOL = 1e-6


def _norm(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip()


def _float(token: str) -> float | None:
    try:
        v = float(token)
    except ValueError:
        return None
    return v


def floats_match(got: str, want: str, tol: float) -> bool:
    a, b = _float(got), _float(want)
    if a is None or b is None:
        return got == want
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * max(1.0, abs(b))


def json_equal(a: Any, b: Any, tol: float) -> bool:
    """Structural equality of parsed JSON values; numbers (not bools) within ``tol``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return floats_match(repr(float(a)), repr(float(b)), tol)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k], tol) for k in a)
    return bool(a == b)


def outputs_match(got: str, want: str, mode: Compare, tol: float = DEFAULT_FLOAT_TOL) -> bool:
    """Whether ``got`` (program output) matches ``want`` (expected) under ``mode``."""
    if mode is Compare.JSON:
        try:
            return json_equal(json.loads(got), json.loads(want), tol)
        except ValueError:
            return outputs_match(got, want, Compare.TOKENS, tol)
    if mode is Compare.EXACT:
        return _norm(got) == _norm(want)
    g, w = got.split(), want.split()
    if len(g) != len(w):
        return False
    if mode is Compare.TOKENS:
        return g == w
    return all(floats_match(x, y, tol) for x, y in zip(g, w, strict=True))
