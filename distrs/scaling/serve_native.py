"""Which serve loops SIMULATE runs: the C ones (``_serve.c``) when built, else the Python ones.

The planner's decision time is almost all serve loop (one heap operation per request per probe):
about 1 µs per request in Python, a few ns in C, the same start times to the bit. The extension
is optional (built by ``setup.py`` when a C compiler is there), so the package works without it;
``DISTRS_SIM_NATIVE=0`` forces the Python loops (to compare the two, or to rule the extension
out). ``SERVE_LOOPS`` says which is in use ("native" or "python"); the benchmarks report it.

The wrappers here take and give what the Python loops do (``simulate.serve_fcfs`` /
``serve_priority``), lists or arrays, for tests and one-off calls; ``Simulator`` calls the
extension directly on its arrays, and also its ``prefix_counts`` (the counts behind
``Simulator.no_wait_bound``, numpy passes per priority level otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Final

import numpy as np

from distrs.scaling.workload import F64

ENV: Final = "DISTRS_SIM_NATIVE"


def load() -> ModuleType | None:
    """The extension module, or None when it is not built or ``DISTRS_SIM_NATIVE=0``."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        from distrs.scaling import _serve  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _serve


KERNEL: ModuleType | None = load()
"""The loops ``Simulator`` uses when it is made (None: the Python ones)."""
SERVE_LOOPS: Final = "native" if KERNEL is not None else "python"


def _heap(free: Sequence[float] | F64) -> F64:
    return np.array(free, dtype=np.float64)


def _put_back(free: Sequence[float] | F64, heap: F64) -> None:
    """Leave ``free`` as the Python loops leave it: the heap after the last replacement."""
    if isinstance(free, list):
        free[:] = heap.tolist()
    elif isinstance(free, np.ndarray):
        free[...] = heap


def _f64(x: Sequence[float] | F64) -> F64:
    return np.ascontiguousarray(x, dtype=np.float64)


def _call(
    loop: Callable[..., bool],
    arr: Sequence[float] | F64,
    svc: Sequence[float] | F64,
    ranks: tuple[np.ndarray, ...],
    free: Sequence[float] | F64,
    wait_limit: Sequence[float] | F64,
    limit: Sequence[float] | F64,
) -> list[float] | None:
    """Run one of the extension's loops as the Python loops run: ``free`` updated in place,
    the start times returned (None on an early failure)."""
    a = _f64(arr)
    start = np.empty_like(a)
    heap = _heap(free)
    ok = loop(a, _f64(svc), *ranks, heap, _f64(wait_limit), _f64(limit), start)
    _put_back(free, heap)
    return start.tolist() if ok else None


def serve_fcfs(
    kernel: ModuleType,
    arr: Sequence[float] | F64,
    svc: Sequence[float] | F64,
    free: Sequence[float] | F64,
    wait_limit: Sequence[float] | F64,
    limit: Sequence[float] | F64,
) -> list[float] | None:
    """``simulate.serve_fcfs`` (without the bulk path, same answer) run by ``kernel``."""
    return _call(kernel.fcfs, arr, svc, (), free, wait_limit, limit)


def serve_priority(
    kernel: ModuleType,
    arr: Sequence[float] | F64,
    svc: Sequence[float] | F64,
    rank: Sequence[int] | np.ndarray,
    free: Sequence[float] | F64,
    wait_limit: Sequence[float] | F64,
    limit: Sequence[float] | F64,
    inv: Sequence[int] | np.ndarray | None = None,
) -> list[float] | None:
    """``simulate.serve_priority`` (without the bulk path, same answer) run by ``kernel``."""
    r = np.ascontiguousarray(rank, dtype=np.int64)
    if inv is None:
        inv_a = np.empty_like(r)
        inv_a[r] = np.arange(r.size)
    else:
        inv_a = np.ascontiguousarray(inv, dtype=np.int64)
    return _call(kernel.priority, arr, svc, (r, inv_a), free, wait_limit, limit)
