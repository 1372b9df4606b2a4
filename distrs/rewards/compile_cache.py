"""A compile cache: the same source, files and compiler compile once per worker.

verl's sandbox client sends one ``/run_code`` per test case, each with the same program; without
a cache every one of them pays the compiler. A compiling handler keeps the outcome of its recent
compiles - the compiled files, or the compiler's refusal - keyed by a SHA-256 of the reward type
or language, the compiler command and the compiler's identity (its real path, size and
modification time: an upgraded compiler is another key), the source and the input files, so a
key can only match the exact same compilation. Time-outs are not cached (they depend on load).
Bounded by total bytes (least recently used out first); one lock, since a worker may run
handlers in threads.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from distrs.rewards.base import StageOutput


def tool_identity(executable: str, path: str | None = None) -> str:
    """``realpath:size:mtime_ns`` of the program ``executable`` names (looked up in ``path``), or
    the bare name where it is not found (the compile then fails, and failures key on it alike).
    A handler asks once per compiler (:class:`ToolIdentities`): its image does not change under it."""
    found = shutil.which(executable, path=path)
    if found is None:
        return executable
    real = os.path.realpath(found)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def cache_key(argv: Sequence[str], source: str, files: Sequence[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(list(argv)).encode())
    h.update(b"\0" + source.encode())
    for name, data in sorted(files):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


@dataclass(frozen=True)
class CompiledFiles:
    """The files a successful compile left in the work dir: ``(name, data, executable)`` each."""

    files: tuple[tuple[str, bytes, bool], ...]


Entry = StageOutput | CompiledFiles


def _size(entry: Entry) -> int:
    if isinstance(entry, CompiledFiles):
        return sum(len(name) + len(data) for name, data, _ in entry.files)
    return sum(len(v) for v in entry.artifacts.values()) + len(json.dumps(entry.detail, default=str))


class CompileCache:
    """``key -> Entry``: a ``next`` with the binary artifact (``cpp``, ``cuda``), the compiled
    files (the generic languages), or a final compile error."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._items: OrderedDict[str, tuple[Entry, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: str) -> Entry | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: str, entry: Entry) -> None:
        size = _size(entry)
        if size > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (entry, size)
            self._bytes += size
            while self._bytes > self._max and self._items:
                _, (_, s) = self._items.popitem(last=False)
                self._bytes -= s


class ToolIdentities:
    """:func:`tool_identity` per (executable, path), asked once each: what one handler keeps."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str | None], str] = {}

    def __call__(self, executable: str, path: str | None = None) -> str:
        key = (executable, path)
        if key not in self._known:
            self._known[key] = tool_identity(executable, path)
        return self._known[key]
