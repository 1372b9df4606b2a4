"""The judging processes' tensor work (``tensors.py``, run here on the CPU): device identity,
the blocked digest against its definition, chunked comparison against ``torch.isclose``, and
the sealed output window."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from distrs.rewards.kernelbench import compare
from distrs.rewards.kernelbench.window import OutputWindow
from tests.requirements import need

need("torch", "the judging processes' tensor code runs torch (the 'kernels' extra: make install)")

import torch  # noqa: E402

from distrs.rewards.kernelbench.in_jail import tensors as T  # noqa: E402

P = 2_147_483_629


def test_cuda_and_cuda0_are_one_device() -> None:
    """Outputs report ``cuda:0``; a process told ``cuda`` must accept them (torch says they differ)."""
    assert torch.device("cuda") != torch.device("cuda:0")
    mine = T.resolve_device("cuda", current_index=0)
    assert mine == torch.device("cuda:0") and T.same_device(torch.device("cuda:0"), mine)
    assert not T.same_device(torch.device("cuda:1"), mine)
    assert not T.same_device(torch.device("cpu"), mine)
    assert T.resolve_device("cpu") == torch.device("cpu") and T.same_device(
        torch.device("cpu"), T.resolve_device("cpu")
    )


def reference_digest(arrays: list[np.ndarray], a: int, b: int) -> tuple[float, float]:
    """The digest's definition, element by element (small inputs only)."""
    ra, rb = T.row_weights(a, b, P)
    d = s = 0.0
    row = 0
    for x in arrays:
        flat = x.astype(np.float64).reshape(-1)
        k = np.arange(flat.size)
        r, c = row + k // T.WIDTH, k % T.WIDTH
        w = (((r * ra + rb) % P) / P) * (((c * a + b) % P) / P)
        d += float((w * flat).sum())
        s += float((w * np.abs(flat)).sum())
        row += -(-flat.size // T.WIDTH)
    return d, s


@pytest.mark.parametrize(
    "sizes", [[5], [T.WIDTH], [3 * T.WIDTH + 17, 2], [T.WIDTH * (T.DIGEST_ROWS + 3) + 1]]
)
def test_the_blocked_digest_is_its_definition(sizes: list[int]) -> None:
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(n, generator=g) for n in sizes]
    a, b = 123_456_789, 987_654
    d, s = T.digest(xs, a, b, P, scale=True)
    want_d, want_s = reference_digest([x.numpy() for x in xs], a, b)
    assert d == pytest.approx(want_d, rel=1e-9, abs=1e-9) and s == pytest.approx(want_s, rel=1e-9)
    assert T.digest(xs, a, b, P)[1] == 0.0  # the scale only where asked


def test_chunk_digests_add_up_to_the_whole() -> None:
    """The reference recomputes a timed call's digest from the chunks the window carries."""
    xs = [torch.randn(3 * T.WIDTH + 100), torch.randn(T.WIDTH + 1)]
    a, b = 77, 91
    outs = compare.parse_meta([{"dtype": "float32", "shape": [x.numel()], "numel": x.numel()} for x in xs])
    total = sum(
        T.segment_digest(xs[c.out][c.start : c.start + c.count], c.row, a, b, P)[0]
        for c in compare.plan_chunks(outs, 2 * T.WIDTH * 4)
    )
    assert total == pytest.approx(T.digest(xs, a, b, P)[0], rel=1e-12)
    assert compare.WIDTH == T.WIDTH


def isclose_stats(ref: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    t = T.compare_dtype(ref.dtype, out.dtype)
    r, o = ref.to(t), out.to(t)
    close = torch.isclose(o, r, rtol=rtol, atol=atol)  # other = the reference, as KernelBench's allclose
    diff = (r - o).abs()
    fin = diff[diff.isfinite()]
    return {
        "bad": int((~close).sum()),
        "max": float(fin.max()) if fin.numel() else 0.0,
        "finite": fin.numel(),
    }


@pytest.mark.parametrize(
    ("ref_dtype", "out_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.float32, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.int64, torch.int64),
    ],
)
def test_chunk_comparison_is_torch_isclose(ref_dtype: torch.dtype, out_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    ref = (torch.randn(10_000, generator=g) * 4).to(ref_dtype)
    out = (ref.to(torch.float64) + torch.randn(10_000, generator=g, dtype=torch.float64) * 1e-3).to(out_dtype)
    if ref.is_floating_point():
        ref[:4] = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.0])
        out[:4] = torch.tensor([float("nan"), float("inf"), float("inf"), float("nan")])
    for atol, rtol in ((1e-2, 1e-2), (1e-4, 1e-4), (0.0, 0.0)):
        got = T.compare_chunk(ref, out, atol, rtol)
        want = isclose_stats(ref, out, atol, rtol)
        assert got["bad"] == want["bad"] and got["finite"] == want["finite"]
        assert got["max"] == pytest.approx(want["max"]) and got["n"] == 10_000
    same = T.compare_chunk(ref, ref.clone(), 0.0, 0.0)
    nan_count = 1 if ref.is_floating_point() else 0
    assert same["bad"] == nan_count  # NaN is never close, not even to itself


def test_the_window_carries_chunks_and_cannot_be_resized() -> None:
    w = OutputWindow.create(slot_bytes=4096)
    try:
        writer = T.Window(w.rw_fd, w.size, w.slot_bytes, writable=True)
        reader = T.Window(w.ro_fd, w.size, w.slot_bytes, writable=False)
        src = torch.arange(1024, dtype=torch.float32)
        assert writer.put(1, src) == 4096
        assert torch.equal(reader.get(1, torch.float32, 1024, torch.device("cpu")), src)
        with pytest.raises(ValueError):
            writer.put(1, torch.zeros(1025))  # more than a slot
        with pytest.raises(ValueError):
            reader.slot(2, torch.float32, 1)  # no third slot
        for size in (0, w.size * 2):  # sealed: the candidate cannot pull the pages from under a reader
            with pytest.raises(PermissionError):
                os.ftruncate(w.rw_fd, size)
        with pytest.raises(OSError):
            os.write(w.ro_fd, b"x")  # the reference's descriptor is read-only
    finally:
        w.close()
