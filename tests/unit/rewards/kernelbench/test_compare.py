"""The host's checks on what the judging processes report (pure): output descriptions, the
chunk plan of the output window, and the tally of the reference's per-chunk statistics."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from distrs.rewards.kernelbench.compare import (
    WIDTH,
    BadTensors,
    Chunk,
    OutputMeta,
    Tally,
    check_meta,
    digest_matches,
    parse_meta,
    plan_chunks,
)

MiB = 1 << 20


def meta(*shapes: tuple[int, ...], dtype: str = "float32") -> list[dict[str, Any]]:
    return [{"dtype": dtype, "shape": list(s), "numel": math.prod(s)} for s in shapes]


def test_a_description_is_parsed_and_checked_against_the_references() -> None:
    ref = parse_meta(meta((4, 5), (3,)))
    assert ref == [OutputMeta("float32", (4, 5), 20), OutputMeta("float32", (3,), 3)]
    assert check_meta(ref, parse_meta(meta((4, 5), (3,), dtype="float16"))) is None
    assert "shape [5, 4], expected [4, 5]" in (check_meta(ref, parse_meta(meta((5, 4), (3,)))) or "")
    assert "1 outputs, expected 2" in (check_meta(ref, parse_meta(meta((4, 5)))) or "")


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "x",
        [{"dtype": "complex64", "shape": [1], "numel": 1}],
        [{"dtype": "float32", "shape": [-1], "numel": -1}],
        [{"dtype": "float32", "shape": [2, 2], "numel": 5}],
        [{"dtype": "float32", "shape": [1] * 20, "numel": 1}],
        [{"dtype": "float32", "shape": [True], "numel": 1}],
        [{"dtype": "float32", "shape": [1], "numel": 1}] * 65,
        [7],
    ],
)
def test_malformed_descriptions_are_refused(bad: Any) -> None:
    with pytest.raises(BadTensors):
        parse_meta(bad)


def test_chunks_cover_every_element_once_in_whole_rows_that_fit_a_slot() -> None:
    outs = parse_meta(meta((3 * WIDTH + 5,), (WIDTH,), dtype="float32") + meta((2 * WIDTH,), dtype="float64"))
    slot = 8 * WIDTH  # two float32 rows or one float64 row per chunk
    chunks = plan_chunks(outs, slot)
    for i, o in enumerate(outs):
        mine = [c for c in chunks if c.out == i]
        assert mine[0].start == 0 and sum(c.count for c in mine) == o.numel
        assert all(a.start + a.count == b.start for a, b in itertools.pairwise(mine))
        assert all(c.count * (8 if o.dtype == "float64" else 4) <= slot for c in mine)
        assert all(c.start % WIDTH == 0 for c in mine)
    # digest rows run on across outputs; the first output's partial last row counts as a row
    assert [(c.out, c.row) for c in chunks] == [(0, 0), (0, 2), (1, 4), (2, 5), (2, 6)]


def stats(n: int, bad: int = 0, mx: float = 0.0, sm: float = 0.0, nonfinite: int = 0) -> dict[str, Any]:
    return {"bad": bad, "n": n, "max": mx, "sum": sm, "finite": n - nonfinite, "nonfinite": nonfinite}


def test_the_tally_adds_chunks_into_kernelbenchs_differences() -> None:
    outs = parse_meta(meta((10,), (6,)))
    t = Tally(outs)
    t.add(Chunk(0, 0, 6, 0), stats(6, mx=0.5, sm=1.0))
    t.add(Chunk(0, 6, 4, 0), stats(4, mx=0.25, sm=1.0))
    t.add(Chunk(1, 0, 6, 1), stats(6, bad=2, mx=2.0, sm=4.0))
    c = t.result()
    assert not c.ok and c.issue == "output 1: 2 of 6 elements outside tolerance"
    assert c.max_difference == 2.0 and c.avg_difference == pytest.approx(6.0 / 16)
    t.add(Chunk(1, 0, 6, 1), stats(6, nonfinite=1))
    assert t.result().max_difference == math.inf


@pytest.mark.parametrize(
    "reply",
    [
        stats(5),  # counts for another chunk
        {**stats(6), "bad": -1},
        {**stats(6), "max": "0"},
        {**stats(6), "finite": True},
        {k: v for k, v in stats(6).items() if k != "sum"},
    ],
)
def test_the_tally_refuses_statistics_that_do_not_fit_the_chunk(reply: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Tally(parse_meta(meta((6,)))).add(Chunk(0, 0, 6, 0), reply)


def test_a_reported_digest_must_be_the_recomputed_one() -> None:
    assert digest_matches(1234.5, 1234.5 + 1e-7, 1e4)
    assert not digest_matches(1234.5, 1235.5, 1e4)
    assert not digest_matches(1234.5, True, 1e4) and not digest_matches(1234.5, "1234.5", 1e4)
