"""The build caches of the compile stage: modules by content (memory and a shared directory),
and the precompiled header store (made once per flag set, in the background)."""

from __future__ import annotations

import threading
from pathlib import Path

from distrs.rewards.kernelbench.in_jail.callkey import call_key, canonical_args
from distrs.rewards.kernelbench.module_cache import BuildError, Built, ModuleCache
from distrs.rewards.kernelbench.pch import PchStore


def test_modules_survive_a_new_process_through_the_directory(tmp_path: Path) -> None:
    a = ModuleCache(1 << 20, str(tmp_path))
    a.put("k1", Built("mod", b"\x7fELF..."))
    a.put("k2", BuildError("main.cpp:3: error: expected ';'"))
    b = ModuleCache(1 << 20, str(tmp_path))  # another worker sharing the volume
    assert b.get("k1") == Built("mod", b"\x7fELF...")
    assert b.get("k2") == BuildError("main.cpp:3: error: expected ';'")
    assert b.get("k3") is None and b.hits == 2


def test_a_truncated_module_on_disk_is_ignored(tmp_path: Path) -> None:
    a = ModuleCache(1 << 20, str(tmp_path))
    a.put("k1", Built("mod", b"0123456789"))
    (so,) = tmp_path.glob("*/k1.so")
    so.write_bytes(b"0123")  # a half-written or tampered file: size no longer matches
    assert ModuleCache(1 << 20, str(tmp_path)).get("k1") is None


def test_memory_cache_is_bounded(tmp_path: Path) -> None:
    c = ModuleCache(25)
    c.put("a", Built("m", b"x" * 10))
    c.put("b", Built("m", b"x" * 10))
    c.put("c", Built("m", b"x" * 10))  # evicts the least recently used
    assert c.get("a") is None and c.get("c") is not None


def test_call_keys_ignore_where_and_how_loudly() -> None:
    def load_inline(name, cpp_sources, functions=None, build_directory=None, verbose=False):  # type: ignore[no-untyped-def]
        raise AssertionError

    k1 = call_key(canonical_args(load_inline, ("m", "src"), {"functions": ["f"], "verbose": True}))
    k2 = call_key(
        canonical_args(
            load_inline, ("m",), {"cpp_sources": "src", "functions": ["f"], "build_directory": "/x"}
        )
    )
    k3 = call_key(canonical_args(load_inline, ("m", "src2"), {"functions": ["f"]}))
    assert k1 == k2 != k3


def test_pch_is_made_once_per_flag_set_in_the_background(tmp_path: Path) -> None:
    made: list[list[str]] = []
    gate = threading.Event()

    def precompile(flags: list[str], out: Path) -> bool:
        gate.wait(5)
        made.append(flags)
        (out / "torch").mkdir()
        (out / "torch" / "extension.h").write_text("// header")
        (out / "torch" / "extension.h.gch").write_bytes(b"gch")
        return True

    store = PchStore(str(tmp_path), "toolchain-1", precompile)
    assert store.get([]) is None  # being made: builds go on without it
    assert store.get([]) is None
    gate.set()
    for t in threading.enumerate():
        if t.name == "kb-pch":
            t.join(5)
    assert made == [[]]
    d = store.get([])
    assert d is not None and (Path(d) / "torch" / "extension.h.gch").read_bytes() == b"gch"
    assert store.get(["-O3"], wait=True) not in (None, d)  # another flag set, another header
    assert PchStore(str(tmp_path), "toolchain-2", precompile).path([]) != store.path([])


def test_a_failed_pch_leaves_nothing_behind(tmp_path: Path) -> None:
    store = PchStore(str(tmp_path), "t", lambda flags, out: False)
    assert store.get([], wait=True) is None
    assert list(tmp_path.iterdir()) == []
