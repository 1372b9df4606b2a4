"""A compile cache: the same source, files and compiler command compile once per worker.

verl's sandbox client sends one ``/run_code`` per test case, each with the same program; without
a cache every one of them pays the compiler. A compile stage worker keeps the outcome of its
recent compiles - the binary, or the compiler's refusal - keyed by a SHA-256 of the reward type's
compiler command, the source and the input files, so a key can only match the exact same
compilation. Time-outs are not cached (they depend on load). Bounded by total bytes (least
recently used out first); one lock, since a worker may run handlers in threads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence

from distrs.rewards.base import StageOutput


def cache_key(argv: Sequence[str], source: str, files: Sequence[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(list(argv)).encode())
    h.update(b"\0" + source.encode())
    for name, data in sorted(files):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


class CompileCache:
    """``key -> StageOutput`` (a ``next`` with the binary artifact, or a final compile error)."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._items: OrderedDict[str, tuple[StageOutput, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: str) -> StageOutput | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: str, out: StageOutput) -> None:
        size = sum(len(v) for v in out.artifacts.values()) + len(json.dumps(out.detail, default=str))
        if size > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (out, size)
            self._bytes += size
            while self._bytes > self._max and self._items:
                _, (_, s) = self._items.popitem(last=False)
                self._bytes -= s
