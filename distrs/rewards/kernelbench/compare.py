"""Pure checks on tensors sent by a judging process: decode, compare, digest (numpy only).

The host never unpickles anything from a jail: tensors arrive as dtype name, shape and raw
little-endian bytes. bfloat16 (which numpy lacks) is widened to float32 exactly by shifting its
bits. Comparison follows ``torch.allclose``: ``|a - b| <= atol + rtol * |b|`` with the reference
as ``b``, NaN never equal; shapes must match exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_NUMPY = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}
MAX_DIMS = 16


class BadTensors(ValueError):
    """The reply's tensor description does not fit its bytes."""


def decode(meta: Any, blob: bytes) -> list[np.ndarray]:
    """Arrays from a reply's ``tensors`` list and its blob; BadTensors on any inconsistency."""
    if not isinstance(meta, list) or not meta:
        raise BadTensors("no tensors")
    out, pos = [], 0
    for m in meta:
        if not isinstance(m, dict):
            raise BadTensors("a tensor entry is not an object")
        dtype, shape, n = m.get("dtype"), m.get("shape"), m.get("nbytes")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_DIMS
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise BadTensors(f"bad shape {shape!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0 or pos + n > len(blob):
            raise BadTensors("sizes do not add up")
        raw = blob[pos : pos + n]
        pos += n
        count = int(np.prod(shape)) if shape else 1
        if dtype == "bfloat16":
            if n != 2 * count:
                raise BadTensors("bfloat16 size mismatch")
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _NUMPY:
            np_dtype = np.dtype(_NUMPY[dtype]).newbyteorder("<")
            if n != np_dtype.itemsize * count:
                raise BadTensors(f"{dtype} size mismatch")
            arr = np.frombuffer(raw, dtype=np_dtype)
        else:
            raise BadTensors(f"unsupported dtype {dtype!r}")
        out.append(arr.reshape(shape))
    if pos != len(blob):
        raise BadTensors("trailing bytes")
    return out


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_difference: float
    avg_difference: float
    issue: str | None = None


def compare(ref: list[np.ndarray], got: list[np.ndarray], atol: float, rtol: float) -> Comparison:
    """allclose of every output pair, with KernelBench's max/avg absolute difference."""
    if len(ref) != len(got):
        return Comparison(False, float("inf"), float("inf"), f"{len(got)} outputs, expected {len(ref)}")
    max_d, total, count, ok, issue = 0.0, 0.0, 0, True, None
    for i, (r, g) in enumerate(zip(ref, got, strict=True)):
        if r.shape != g.shape:
            return Comparison(
                False,
                float("inf"),
                float("inf"),
                f"output {i} has shape {list(g.shape)}, expected {list(r.shape)}",
            )
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        diff = np.abs(rf - gf)
        nan = np.isnan(rf) | np.isnan(gf)
        close = (diff <= atol + rtol * np.abs(rf)) & ~nan
        if diff.size:
            finite = diff[~nan]
            max_d = max(max_d, float(finite.max()) if finite.size else float("inf"))
            total += float(finite.sum())
            count += int(finite.size)
            if nan.any():
                max_d = float("inf")
        if not bool(close.all()):
            ok = False
            issue = issue or f"output {i}: {int((~close).sum())} of {close.size} elements outside tolerance"
    return Comparison(ok, max_d, total / count if count else 0.0, issue)


def digest(outs: list[np.ndarray], a: int, b: int, p: int) -> float:
    """The weighted sum a judging process reports for its outputs (``run_child.py``)."""
    flat = np.concatenate([o.astype(np.float64).reshape(-1) for o in outs]) if outs else np.zeros(0)
    idx = np.arange(flat.size, dtype=np.int64)
    w = ((idx * a + b) % p).astype(np.float64) / p
    return float((flat * w).sum())


def digest_matches(expected: float, reported: Any, outs: list[np.ndarray]) -> bool:
    """Whether a reported digest is the digest of ``outs`` up to float64 summation order."""
    if isinstance(reported, bool) or not isinstance(reported, (int, float)):
        return False
    scale = sum(float(np.abs(o.astype(np.float64)).sum()) for o in outs) + 1.0
    return bool(abs(float(reported) - expected) <= 1e-9 * scale)
