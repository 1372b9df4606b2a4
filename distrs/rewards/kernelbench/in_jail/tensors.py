"""Tensor work of the judging processes: digests, chunked comparison, the output window.

Runs inside the execute jails (``judge_process.py`` loads this file by path; torch only, nothing of
``distrs``) and in the host's tests. Everything here works in bounded memory whatever the
output's size: KernelBench's current problems have single outputs of 6-7 GiB, so no step may
cast, concatenate or index a whole output at once.

**Digest.** A timed call's outputs are summarised as ``sum_k w_k x_k`` with weights
``w_k = u_r v_c`` in [0, 1): ``k = r * WIDTH + c`` runs over the elements of every output in
order (each output starts a new row), ``v_c = ((c a + b) mod p) / p`` and
``u_r = ((r a' + b') mod p) / p`` for the host's secret ``a, b`` (``a' = b mod (p - 1) + 1``,
``b' = a``). The sum over a block of full rows is one matrix-vector product in float64
(``X @ v``, then ``u · (X v)``), so a 6 GiB output costs one pass over its memory and a block
of float64 scratch, not an index and a weight per element. Its scale ``sum_k w_k |x_k|`` bounds
how far two allclose outputs' digests may differ (``distrs/rewards/kernelbench/compare.py``).

**Comparison.** ``torch.isclose`` semantics with the reference as ``other``:
``|ref - out| <= atol + rtol * |ref|`` or exactly equal, NaN never equal; in the promoted
floating type of both sides (at least float32), one chunk at a time. A chunk's statistics add
up over chunks (elements outside tolerance, the largest and the sum of finite differences).

**Window.** The candidate hands its outputs to the reference's process through a shared,
sealed memory file (``window.py`` on the host): the candidate copies a chunk of one output into
a slot of it, the reference reads that slot and compares it with the same chunk of its own
output, on its own device. The file cannot shrink or grow (sealed), so a reader never faults on
it; the reference holds it read-only and never writes to it, so nothing of the reference's
outputs or memory reaches the candidate.
"""

from __future__ import annotations

import mmap
import warnings
from typing import Any

import torch

WIDTH = 4096  # elements per digest row; a window chunk is a whole number of rows
DIGEST_ROWS = 4096  # rows per float64 block of the digest (16 Mi elements, 128 MiB of scratch)
DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def resolve_device(name: str, current_index: int | None = None) -> torch.device:
    """The device a process computes on, with its index resolved: outputs report ``cuda:0``,
    never ``cuda``, and ``torch.device("cuda") != torch.device("cuda:0")``."""
    dev = torch.device(name)
    if dev.type == "cuda" and dev.index is None:
        index = torch.cuda.current_device() if current_index is None else current_index
        return torch.device("cuda", index)
    return dev


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two resolved devices are the same: type, and index where the type has one."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)


# -- digest ------------------------------------------------------------------------------------


def _weights(n: int, first: int, a: int, b: int, p: int, device: torch.device) -> torch.Tensor:
    idx = torch.arange(first, first + n, dtype=torch.int64, device=device)
    return ((idx * a + b) % p).to(torch.float64) / p


def row_weights(a: int, b: int, p: int) -> tuple[int, int]:
    """(a', b') of the row weights ``u`` from the host's ``a, b`` (see the module docstring)."""
    return b % (p - 1) + 1, a


def segment_digest(
    flat: torch.Tensor, first_row: int, a: int, b: int, p: int, *, scale: bool = False
) -> tuple[float, float]:
    """(digest, scale) of a run of elements starting at row ``first_row`` (a whole row's start).

    ``scale`` is only computed when asked (0.0 otherwise): it is the reference's bound.
    """
    n = flat.numel()
    if n == 0:
        return 0.0, 0.0
    dev = flat.device
    v = _weights(WIDTH, 0, a, b, p, dev)
    ra, rb = row_weights(a, b, p)
    rows, tail = divmod(n, WIDTH)
    digest = torch.zeros((), dtype=torch.float64, device=dev)
    total = torch.zeros((), dtype=torch.float64, device=dev)
    for r in range(0, rows, DIGEST_ROWS):
        k = min(DIGEST_ROWS, rows - r)
        x = flat[r * WIDTH : (r + k) * WIDTH].reshape(k, WIDTH).to(torch.float64)
        u = _weights(k, first_row + r, ra, rb, p, dev)
        digest += u @ (x @ v)
        if scale:
            total += u @ (x.abs_() @ v)
        del x
    if tail:
        x = flat[rows * WIDTH :].to(torch.float64)
        u_last = ((first_row + rows) * ra + rb) % p / p
        digest += u_last * (x @ v[:tail])
        if scale:
            total += u_last * (x.abs() @ v[:tail])
    return float(digest), float(total)


def rows_of(numel: int) -> int:
    """Digest rows an output of ``numel`` elements takes (its last row may be partial)."""
    return -(-numel // WIDTH)


def digest(flats: list[torch.Tensor], a: int, b: int, p: int, *, scale: bool = False) -> tuple[float, float]:
    """(digest, scale) of a call's outputs, each flattened (see the module docstring)."""
    d = s = 0.0
    row = 0
    for f in flats:
        dd, ss = segment_digest(f, row, a, b, p, scale=scale)
        d += dd
        s += ss
        row += rows_of(f.numel())
    return d, s


# -- comparison --------------------------------------------------------------------------------


def compare_dtype(ref: torch.dtype, out: torch.dtype) -> torch.dtype:
    """The type a chunk is compared in: the promoted floating type, at least float32."""
    t = torch.promote_types(ref, out)
    if not t.is_floating_point:
        return torch.float64
    return t if t == torch.float64 else torch.float32


def compare_chunk(ref: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    """Statistics of one chunk: ``bad`` elements outside tolerance, ``max``/``sum``/``finite``
    of the finite absolute differences, ``nonfinite`` differences (NaN or infinite)."""
    t = compare_dtype(ref.dtype, out.dtype)
    r, o = ref.to(t), out.to(t)
    n = r.numel()
    if n == 0:
        return {"bad": 0, "n": 0, "max": 0.0, "sum": 0.0, "finite": 0, "nonfinite": 0}
    if ref.dtype == out.dtype and torch.equal(ref, out):  # one pass; False wherever a NaN is
        finite_n = n
        if ref.is_floating_point():  # max and min propagate NaN: counted only where not finite
            lo, hi = torch.aminmax(ref)
            if not (bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))):
                finite_n = int(torch.count_nonzero(ref.isfinite()))
        return {"bad": 0, "n": n, "max": 0.0, "sum": 0.0, "finite": finite_n, "nonfinite": n - finite_n}
    diff = (r - o).abs_()  # NaN where either is NaN, or both are the same infinity
    tol = r.abs().mul_(rtol).add_(atol)
    bad = n - int(torch.count_nonzero(diff <= tol))  # a NaN difference is never within tolerance
    del tol
    top = diff.max()  # NaN propagates: a finite maximum means every difference is finite
    if bool(torch.isfinite(top)):
        return {
            "bad": bad,
            "n": n,
            "max": float(top),
            "sum": float(diff.sum(dtype=torch.float64)),
            "finite": n,
            "nonfinite": 0,
        }
    finite = diff.isfinite()
    nfinite = int(torch.count_nonzero(finite))
    # torch.isclose: equal values (infinities too) are close, otherwise only finite ones within
    # tolerance; NaN is never equal to anything
    tol = r.abs().mul_(rtol).add_(atol)
    bad = n - int(torch.count_nonzero((r == o) | (finite & (diff <= tol))))
    del tol
    fd = diff[finite]
    return {
        "bad": bad,
        "n": n,
        "max": float(fd.max()) if fd.numel() else 0.0,
        "sum": float(fd.sum(dtype=torch.float64)) if fd.numel() else 0.0,
        "finite": nfinite,
        "nonfinite": n - nfinite,
    }


def chunk_elements(slot_bytes: int, itemsize: int) -> int:
    """Elements of one window chunk: whole digest rows that fit a slot."""
    rows = max(1, slot_bytes // (itemsize * WIDTH))
    return rows * WIDTH


# -- window ------------------------------------------------------------------------------------


class Window:
    """This process's mapping of the window (``fd`` inherited from the host), in slots."""

    def __init__(self, fd: int, size: int, slot_bytes: int, *, writable: bool) -> None:
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=prot)
        self.slot_bytes = slot_bytes
        self.slots = size // slot_bytes
        with warnings.catch_warnings():  # a read-only buffer is what the reader should get
            warnings.simplefilter("ignore")
            self.bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self.pinned = False

    def pin(self, *, read_only: bool) -> bool:
        """Page-lock the mapping for the GPU's copies (faster transfers); False where refused."""
        try:
            flags = 8 if read_only else 0  # cudaHostRegisterReadOnly
            err = torch.cuda.cudart().cudaHostRegister(self.bytes.data_ptr(), self.bytes.numel(), flags)
            self.pinned = int(err) == 0
        except Exception:
            self.pinned = False
        return self.pinned

    def slot(self, k: int, dtype: torch.dtype, count: int) -> torch.Tensor:
        if not 0 <= k < self.slots:
            raise ValueError(f"slot {k} outside the window's {self.slots}")
        size = torch.empty((), dtype=dtype).element_size()
        if count * size > self.slot_bytes:
            raise ValueError(f"{count} elements of {dtype} exceed a slot of {self.slot_bytes} bytes")
        start = k * self.slot_bytes
        return self.bytes[start : start + count * size].view(dtype)

    def put(self, k: int, src: torch.Tensor) -> int:
        """Copy ``src`` (one chunk of a flattened output) into slot ``k``; its bytes."""
        dst = self.slot(k, src.dtype, src.numel())
        dst.copy_(src)
        return src.numel() * src.element_size()

    def get(self, k: int, dtype: torch.dtype, count: int, device: torch.device) -> torch.Tensor:
        """Slot ``k`` as ``count`` elements of ``dtype`` on ``device`` (a copy on a GPU; on the
        CPU the mapping itself, read-only)."""
        view = self.slot(k, dtype, count)
        return view.to(device) if device.type != "cpu" else view
