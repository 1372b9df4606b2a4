"""Precompiled ``torch/extension.h`` for the clean builds of ``load_inline`` calls.

Every module ``load_inline`` builds compiles a generated ``main.cpp`` that opens with
``#include <torch/extension.h>``; parsing torch's headers is most of that compile (47 s of CPU
of 48 on this repository's 2-core machine, see docs/kernels.md). g++ loads a precompiled header
instead when one sits beside the header it finds first on the include path and was made with the
same flags; otherwise it parses as usual, so a stale or mismatched header can cost time but never
change a module.

One header per (toolchain, extra C++ flags of the call), made in a jail from torch's own header
with the flags torch gives ``main.cpp`` (``build_call.py --pch``), in the background the first
time those flags are seen: builds go on without it meanwhile. Kept under the build cache's
directory when there is one (shared by a compile pool), else in a directory of this process.
The host writes it (atomically, a whole directory renamed into place); jails see it read-only.
The keeping itself is :class:`distrs.rewards.pch_store.PchStore`'s.
"""

from __future__ import annotations

from distrs.rewards import pch_store
from distrs.rewards.pch_store import Precompile

GCH_MAX_BYTES = 4 << 30  # torch 2.14's header precompiles to about 0.8 GB

__all__ = ["GCH_MAX_BYTES", "PchStore", "Precompile"]


class PchStore(pch_store.PchStore):
    """``ROOT/KEY/torch/extension.h.gch`` per (toolchain, extra C++ flags)."""

    def __init__(self, root: str, toolchain: str, precompile: Precompile) -> None:
        super().__init__(root, toolchain, precompile, header="torch/extension.h", kind="kb-pch/1")
