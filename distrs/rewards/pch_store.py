"""Precompiled headers kept per (toolchain, flag set), made once in the background.

g++ looks for ``NAME.gch`` beside every ``NAME`` it searches for on the include path and loads it
instead of parsing the header when it was made from the same header with the same options and
the same macros defined; otherwise it ignores it and goes on searching. So a directory holding
only ``HEADER.gch``, put first on the include path, can speed a compile up but never change what
it produces. Both users of this (``cxx_pch.py`` for ``bits/stdc++.h``, ``kernelbench/pch.py``
for ``torch/extension.h``) keep one such directory per key here.

A key is a hash of the toolchain's identity and the exact flags, so a changed compiler or flag
set is another directory, never a stale header. The first :meth:`PchStore.get` of a key starts
making it in a thread and answers None meanwhile: compiles go on without it. A finished
directory is published whole (a temporary directory renamed into place), under a lock on the root, so
several workers sharing a root make each header once and nobody sees half a header. Read-only
``prebuilt`` roots (made at image build) are looked up first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# (flags, output directory) -> whether the header was made there
Precompile = Callable[[list[str], Path], bool]


def pch_key(kind: str, toolchain: str, flags: Sequence[str]) -> str:
    """The directory name of one (toolchain, flag set)."""
    return hashlib.sha256(json.dumps([kind, toolchain, list(flags)]).encode()).hexdigest()[:32]


class PchStore:
    """Directories ``ROOT/KEY`` holding ``HEADER.gch`` (``header`` is relative, e.g. ``bits/stdc++.h``)."""

    def __init__(
        self,
        root: str,
        toolchain: str,
        precompile: Precompile,
        *,
        header: str,
        kind: str,
        prebuilt: Sequence[str] = (),
    ) -> None:
        self._root = Path(root) if root else Path(tempfile.mkdtemp(prefix="distrs-pch-"))
        self._toolchain = toolchain
        self._precompile = precompile
        self._header = header
        self._kind = kind
        self._prebuilt = [Path(p) for p in prebuilt if p]
        self._lock = threading.Lock()
        self._started: set[str] = set()

    def key(self, flags: Sequence[str]) -> str:
        return pch_key(self._kind, self._toolchain, flags)

    def path(self, flags: Sequence[str]) -> Path:
        """Where this process makes the header for ``flags``."""
        return self._root / self.key(flags)

    def _ready(self, d: Path) -> bool:
        return (d / (self._header + ".gch")).is_file()

    def find(self, flags: Sequence[str]) -> str | None:
        """The ready directory for ``flags`` (a prebuilt one first), or None."""
        key = self.key(flags)
        for d in (*(p / key for p in self._prebuilt), self._root / key):
            if self._ready(d):
                return str(d)
        return None

    def get(self, flags: Sequence[str], *, wait: bool = False) -> str | None:
        """The directory to put first on the include path, or None while it is being made."""
        found = self.find(flags)
        if found is not None:
            return found
        key = self.key(flags)
        with self._lock:
            first = key not in self._started
            self._started.add(key)
        if first:
            t = threading.Thread(
                target=self._make, args=(list(flags),), name=self._kind.split("/")[0], daemon=True
            )
            t.start()
            if wait:
                t.join()
                return self.find(flags)
        return None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The root itself, locked: no lock file is left behind."""
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _make(self, flags: list[str]) -> None:
        d = self.path(flags)
        tmp = d.with_name(f".{d.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            with self._locked():
                if self._ready(d):  # another process sharing the root made it meanwhile
                    return
                tmp.mkdir()
                if self._precompile(flags, tmp):
                    shutil.rmtree(d, ignore_errors=True)  # a partial leftover of a killed process
                    os.replace(tmp, d)
                    log.info("precompiled %s for flags %s in %s", self._header, flags, d)
        except OSError as e:
            log.warning("could not keep a precompiled %s in %s: %s", self._header, d, e)
        except Exception:
            log.exception("precompiling %s failed; compiles go on without it", self._header)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
