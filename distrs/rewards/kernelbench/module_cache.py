"""Built extension modules by content: (call key, toolchain) -> (module name, shared object).

A module is built in a clean jail from a ``load_inline`` call's arguments alone
(``build_call.py``), so it is a function of its key and may be shared by every request that
makes the same call, within and across candidates (a GRPO group's samples often share their
kernel and differ in the Python around it). Two levels: a bounded in-memory LRU per worker,
and optionally a directory shared by compile workers (a volume), written only by the host
(atomically: a temporary name, then ``os.replace``), never by a jail. A compiler's refusal is
kept the same way (it is as deterministic as a success); time-outs are never kept.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Built:
    module: str
    data: bytes


@dataclass(frozen=True)
class BuildError:
    message: str


Entry = Built | BuildError


class ModuleCache:
    def __init__(self, max_bytes: int, directory: str = "") -> None:
        self._max = max_bytes
        self._dir = Path(directory) if directory else None
        self._items: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def _size(e: Entry) -> int:
        return len(e.data) if isinstance(e, Built) else len(e.message)

    def get(self, key: str) -> Entry | None:
        with self._lock:
            e = self._items.get(key)
            if e is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return e
        found = self._read_disk(key)
        if found is not None:
            self._remember(key, found)
            with self._lock:
                self.hits += 1
        return found

    def put(self, key: str, entry: Entry) -> None:
        self._remember(key, entry)
        self._write_disk(key, entry)

    def _remember(self, key: str, entry: Entry) -> None:
        size = self._size(entry)
        if size > self._max:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= self._size(old)
            self._items[key] = entry
            self._bytes += size
            while self._bytes > self._max and self._items:
                _, e = self._items.popitem(last=False)
                self._bytes -= self._size(e)

    def _paths(self, key: str) -> tuple[Path, Path] | None:
        if self._dir is None:
            return None
        d = self._dir / key[:2]
        return d / f"{key}.so", d / f"{key}.json"

    def _read_disk(self, key: str) -> Entry | None:
        paths = self._paths(key)
        if paths is None:
            return None
        so, meta = paths
        try:
            info = json.loads(meta.read_text())
            if isinstance(info, dict) and isinstance(info.get("error"), str):
                return BuildError(info["error"])
            data = so.read_bytes()
        except (OSError, ValueError):
            return None
        if (
            not isinstance(info, dict)
            or info.get("size") != len(data)
            or not isinstance(info.get("module"), str)
        ):
            return None
        return Built(info["module"], data)

    def _write_disk(self, key: str, entry: Entry) -> None:
        paths = self._paths(key)
        if paths is None:
            return
        so, meta = paths
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(entry, Built):
                _write_atomic(so, entry.data)
                info: dict[str, object] = {"module": entry.module, "size": len(entry.data)}
            else:
                info = {"error": entry.message}
            _write_atomic(meta, json.dumps(info).encode())
        except OSError:
            pass  # a full or read-only volume only costs a rebuild


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
