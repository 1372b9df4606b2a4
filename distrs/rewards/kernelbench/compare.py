"""Pure checks the host makes on what the judging processes report (no tensors here).

The tensors never leave the device: the reference's process compares the candidate's outputs
chunk by chunk (``tensors.py``). The host validates the candidate's description of its outputs
against the reference's (:func:`check_meta`), plans the chunks (:func:`plan_chunks`), and adds up
the reference's per-chunk statistics into KernelBench's verdict and differences
(:class:`Tally`). Any reply field it reads is checked for type first: a reply is input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WIDTH = 4096  # tensors.WIDTH: elements per digest row
ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
MAX_DIMS = 16
MAX_OUTPUTS = 64


class BadTensors(ValueError):
    """A description of outputs that does not hold together."""


@dataclass(frozen=True)
class OutputMeta:
    dtype: str
    shape: tuple[int, ...]
    numel: int

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE[self.dtype]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_meta(meta: Any) -> list[OutputMeta]:
    """The ``tensors`` list of a trial reply; BadTensors on any inconsistency."""
    if not isinstance(meta, list) or not meta:
        raise BadTensors("no tensors")
    if len(meta) > MAX_OUTPUTS:
        raise BadTensors(f"{len(meta)} outputs (at most {MAX_OUTPUTS})")
    out = []
    for i, m in enumerate(meta):
        if not isinstance(m, dict):
            raise BadTensors(f"output {i}: not an object")
        dtype, shape, numel = m.get("dtype"), m.get("shape"), m.get("numel")
        if dtype not in ITEMSIZE:
            raise BadTensors(f"output {i}: unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_int(d) and d >= 0 for d in shape):
            raise BadTensors(f"output {i}: bad shape {shape!r}")
        if not _int(numel) or numel != math.prod(shape):
            raise BadTensors(f"output {i}: {numel!r} elements do not fit the shape {shape}")
        out.append(OutputMeta(str(dtype), tuple(shape), numel))
    return out


def check_meta(ref: list[OutputMeta], cand: list[OutputMeta]) -> str | None:
    """Why the candidate's outputs cannot match the reference's (count, shapes), or None."""
    if len(ref) != len(cand):
        return f"{len(cand)} outputs, expected {len(ref)}"
    for i, (r, c) in enumerate(zip(ref, cand, strict=True)):
        if r.shape != c.shape:
            return f"output {i} has shape {list(c.shape)}, expected {list(r.shape)}"
    return None


@dataclass(frozen=True)
class Chunk:
    out: int
    start: int
    count: int
    row: int  # the digest row of its first element

    def command(self, slot: int) -> dict[str, Any]:
        return {"out": self.out, "start": self.start, "count": self.count, "slot": slot, "row": self.row}


def plan_chunks(outputs: list[OutputMeta], slot_bytes: int) -> list[Chunk]:
    """Every output cut into chunks of whole digest rows that fit a window slot."""
    chunks: list[Chunk] = []
    row = 0
    for i, o in enumerate(outputs):
        per = max(1, slot_bytes // (ITEMSIZE[o.dtype] * WIDTH)) * WIDTH
        for start in range(0, o.numel, per):
            chunks.append(Chunk(i, start, min(per, o.numel - start), row + start // WIDTH))
        row += -(-o.numel // WIDTH)
    return chunks


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_difference: float
    avg_difference: float
    issue: str | None = None


class Tally:
    """The reference's per-chunk statistics added up (``tensors.compare_chunk``)."""

    def __init__(self, outputs: list[OutputMeta]) -> None:
        self._outputs = outputs
        self.bad = [0] * len(outputs)
        self.max = 0.0
        self.sum = 0.0
        self.finite = 0
        self.nonfinite = 0
        self.digest = 0.0
        self.scale = 0.0

    def add(self, chunk: Chunk, stats: dict[str, Any]) -> None:
        """Add one chunk's statistics; ValueError where they are not the reference's shape."""
        for k in ("bad", "n", "finite", "nonfinite"):
            if not _int(stats.get(k)) or stats[k] < 0:
                raise ValueError(f"chunk statistics: bad {k!r}")
        for k in ("max", "sum"):
            if not isinstance(stats.get(k), (int, float)) or isinstance(stats[k], bool):
                raise ValueError(f"chunk statistics: bad {k!r}")
        if stats["n"] != chunk.count or stats["finite"] + stats["nonfinite"] != chunk.count:
            raise ValueError("chunk statistics: counts do not add up")
        self.bad[chunk.out] += stats["bad"]
        self.max = max(self.max, float(stats["max"]))
        self.sum += float(stats["sum"])
        self.finite += stats["finite"]
        self.nonfinite += stats["nonfinite"]
        if "digest" in stats:
            self.digest += float(stats["digest"])
            self.scale += float(stats["scale"])

    def result(self) -> Comparison:
        """KernelBench's verdict and differences: max and mean absolute difference (infinite
        where any difference is NaN or infinite)."""
        issue = None
        for i, bad in enumerate(self.bad):
            if bad:
                issue = f"output {i}: {bad} of {self._outputs[i].numel} elements outside tolerance"
                break
        max_d = math.inf if self.nonfinite else self.max
        avg = self.sum / self.finite if self.finite else 0.0
        return Comparison(issue is None, max_d, avg, issue)


def digest_matches(expected: float, reported: Any, scale: float) -> bool:
    """Whether a reported digest is the digest of the outputs that produced ``expected`` and
    ``scale``, up to float64 summation order (the two sums run over different blocks)."""
    if isinstance(reported, bool) or not isinstance(reported, (int, float)):
        return False
    return abs(float(reported) - expected) <= 1e-9 * (abs(scale) + 1.0)
