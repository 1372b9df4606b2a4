"""Precompiled ``torch/extension.h`` for the clean builds of ``load_inline`` calls.

Every module ``load_inline`` builds compiles a generated ``main.cpp`` that opens with
``#include <torch/extension.h>``; parsing torch's headers is most of that compile (47 s of CPU
of 48 on this repository's 2-core machine, see docs/kernels.md). g++ loads a precompiled header
instead when one sits beside the header it finds first on the include path and was made with the
same flags; otherwise it parses as usual, so a stale or mismatched header can cost time but never
change a module.

One header per (toolchain, extra C++ flags of the call), made in a jail from torch's own header
with the flags torch gives ``main.cpp`` (``builder_child.py --pch``), in the background the first
time those flags are seen: builds go on without it meanwhile. Kept under the build cache's
directory when there is one (shared by a compile pool), else in a directory of this process.
The host writes it (atomically, a whole directory renamed into place); jails see it read-only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

GCH_MAX_BYTES = 4 << 30  # torch 2.14's header precompiles to about 0.8 GB

# (extra C++ flags, output directory) -> whether the header was made there
Precompile = Callable[[list[str], Path], bool]


class PchStore:
    def __init__(self, root: str, toolchain: str, precompile: Precompile) -> None:
        self._root = Path(root) if root else Path(tempfile.mkdtemp(prefix="distrs-kb-pch-"))
        self._toolchain = toolchain
        self._precompile = precompile
        self._lock = threading.Lock()
        self._started: set[str] = set()

    def _key(self, extra_cflags: list[str]) -> str:
        return hashlib.sha256(json.dumps(["kb-pch/1", self._toolchain, extra_cflags]).encode()).hexdigest()[
            :32
        ]

    def path(self, extra_cflags: list[str]) -> Path:
        return self._root / self._key(extra_cflags)

    def get(self, extra_cflags: list[str], *, wait: bool = False) -> str | None:
        """The directory to put first on the include path, or None while it is being made."""
        d = self.path(extra_cflags)
        if (d / "torch" / "extension.h.gch").is_file():
            return str(d)
        key = self._key(extra_cflags)
        with self._lock:
            first = key not in self._started
            self._started.add(key)
        if first:
            t = threading.Thread(target=self._make, args=(extra_cflags, d), name="kb-pch", daemon=True)
            t.start()
            if wait:
                t.join()
                return self.get(extra_cflags)
        return None

    def _make(self, extra_cflags: list[str], d: Path) -> None:
        tmp = d.with_name(f".{d.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            if self._precompile(extra_cflags, tmp):
                os.replace(tmp, d)
                log.info("precompiled torch/extension.h for flags %s in %s", extra_cflags, d)
        except OSError as e:
            log.warning("could not keep a precompiled header in %s: %s", d, e)
        except Exception:
            log.exception("precompiling torch/extension.h failed; builds go on without it")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
