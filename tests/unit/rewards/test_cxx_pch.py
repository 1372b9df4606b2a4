"""Precompiled bits/stdc++.h: compiler identity, -H parsing, the store (prebuilt first, made once
per key, shared roots), the private default root, the jail bind and the compile argv."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards import cpp, cxx_pch
from distrs.rewards.base import StageInput
from distrs.rewards.cxx_pch import JAIL_PCH_DIR, PchUse
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.pch_store import PchStore, pch_key
from distrs.sandbox import Limits, RunResult, Termination
from distrs.sandbox.base import Mounts
from distrs.sandbox.jail import JailSpec, bwrap_args

GCC = "g++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
CLANG = "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\nThread model: posix\n"


def test_identity_is_the_tool_and_gccs_version_line_and_none_for_other_compilers() -> None:
    assert cxx_pch.identity_of("/usr/bin/g++-12:1:2", GCC) == "/usr/bin/g++-12:1:2\n" + GCC.splitlines()[0]
    assert cxx_pch.identity_of("/usr/bin/clang++:1:2", CLANG) is None
    assert cxx_pch.identity_of("/usr/bin/clang++:1:2", CLANG + "Free Software Foundation") is None
    assert cxx_pch.identity_of("x", "") is None


def test_header_path_and_use_are_read_from_dash_h_output() -> None:
    err = ". /usr/include/x86_64-linux-gnu/c++/12/bits/stdc++.h\n.. /usr/include/c++/12/cassert\n"
    assert cxx_pch.header_path(err) == "/usr/include/x86_64-linux-gnu/c++/12/bits/stdc++.h"
    assert cxx_pch.header_path(". /usr/include/stdio.h\n") is None
    assert cxx_pch.pch_used("! /jail/pch/bits/stdc++.h.gch\n main.cpp\n", "/jail/pch")
    assert not cxx_pch.pch_used(
        "x /jail/pch/bits/stdc++.h.gch\n. /usr/include/x/bits/stdc++.h\n", "/jail/pch"
    )
    assert not cxx_pch.pch_used("! /other/bits/stdc++.h.gch\n", "/jail/pch")


def _fake_precompile(calls: list[list[str]], gate: threading.Event | None = None) -> Any:
    def precompile(flags: list[str], out: Path) -> bool:
        if gate is not None:
            gate.wait(5)
        calls.append(flags)
        (out / "bits").mkdir()
        (out / "bits" / "stdc++.h.gch").write_bytes(repr(flags).encode())
        return True

    return precompile


def _store(root: Path, calls: list[list[str]], **kw: Any) -> PchStore:
    return PchStore(str(root), "gcc-1", _fake_precompile(calls), header="bits/stdc++.h", kind="t/1", **kw)


def test_a_header_is_made_once_per_flag_set_and_answers_none_until_it_is_there(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    gate = threading.Event()
    store = PchStore(
        str(tmp_path), "gcc-1", _fake_precompile(calls, gate), header="bits/stdc++.h", kind="t/1"
    )
    assert store.get(["-O2"]) is None and store.get(["-O2"]) is None  # being made: compile without
    gate.set()
    for t in threading.enumerate():
        if t.name == "t":
            t.join(5)
    d = store.get(["-O2"])
    assert calls == [["-O2"]] and d == str(tmp_path / pch_key("t/1", "gcc-1", ["-O2"]))
    assert store.get(["-O0"], wait=True) not in (None, d)  # another flag set, another header
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing half-made


def test_keys_differ_by_kind_toolchain_and_every_flag() -> None:
    base = pch_key("k/1", "gcc-1", ["-std=c++17", "-O2"])
    others = [
        pch_key("k/2", "gcc-1", ["-std=c++17", "-O2"]),
        pch_key("k/1", "gcc-2", ["-std=c++17", "-O2"]),
        pch_key("k/1", "gcc-1", ["-O2", "-std=c++17"]),
        pch_key("k/1", "gcc-1", ["-std=c++17", "-O2", "-pipe"]),
    ]
    assert base not in others and len(set(others)) == len(others)


def test_a_prebuilt_header_is_used_first_and_nothing_is_made(tmp_path: Path) -> None:
    image = tmp_path / "image"
    key_dir = image / pch_key("t/1", "gcc-1", ["-O2"])
    (key_dir / "bits").mkdir(parents=True)
    (key_dir / "bits" / "stdc++.h.gch").write_bytes(b"gch")
    calls: list[list[str]] = []
    store = _store(tmp_path / "own", calls, prebuilt=(str(image),))
    assert store.get(["-O2"]) == str(key_dir) and calls == []
    assert store.get(["-O3"], wait=True) == str(store.path(["-O3"])) and calls == [["-O3"]]


def test_a_second_store_on_the_same_root_finds_the_header_instead_of_making_it(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    first = _store(tmp_path, calls).get(["-O2"], wait=True)
    again = _store(tmp_path, calls)
    assert again.get(["-O2"]) == first and calls == [["-O2"]]
    # a thread that started before another process published it finds it under the root's lock
    again._make(["-O2"])
    assert calls == [["-O2"]]


def test_a_failed_header_leaves_nothing_behind(tmp_path: Path) -> None:
    store = PchStore(str(tmp_path), "t", lambda flags, out: False, header="bits/stdc++.h", kind="t/1")
    assert store.get([], wait=True) is None
    assert list(tmp_path.iterdir()) == []


def test_the_default_root_is_private_to_this_user_or_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = cxx_pch.default_root()
    assert root == str(tmp_path / f"distrs-pch-{os.geteuid()}")
    assert os.stat(root).st_mode & 0o777 == 0o700
    os.chmod(root, 0o777)  # opened to others (someone could plant a header): not used
    assert cxx_pch.default_root() == ""
    os.rmdir(root)
    os.symlink(tmp_path, root)  # a link planted under the name: not followed
    assert cxx_pch.default_root() == ""


@pytest.mark.parametrize(
    ("enabled", "isolation", "cxx"),
    [(False, "bwrap", "g++"), (True, "rlimits", "g++"), (True, "bwrap", "no-such-compiler-x")],
)
def test_no_header_when_off_without_a_jail_or_without_gcc(enabled: bool, isolation: str, cxx: str) -> None:
    assert cxx_pch.pch_use(cxx, ["-O2"], isolation, enabled=enabled, root="", image_dir="") is None


def test_the_jail_binds_the_header_read_only_outside_every_writable_dir() -> None:
    spec = JailSpec(bwrap="bwrap", workdir="/w", tmpdir="/t", tmp_bytes=1)
    args = bwrap_args(spec, {}, Mounts(binds=(("/host/pch/abc", JAIL_PCH_DIR),)))
    i = args.index("/host/pch/abc")
    assert args[i - 1 : i + 2] == ["--ro-bind", "/host/pch/abc", "/jail/pch"]
    for dest in ("/tmp/pch", "/jail/work/pch", "/jail/work", "/usr/pch"):
        with pytest.raises(ValueError, match="under /jail/"):
            bwrap_args(spec, {}, Mounts(binds=(("/host/pch/abc", dest),)))


class _Session:
    isolation = "bwrap"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Any]] = []

    @contextmanager
    def session(self) -> Iterator[_Session]:
        yield self

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        return Path("/nonexistent") / name

    def run(self, argv: Sequence[str], *, limits: Limits, **kw: Any) -> RunResult:
        self.calls.append((list(argv), kw.get("mounts")))
        return RunResult(Termination.EXITED, 1, None, b"", b"error", 0.1, 0.1)


def test_the_cpp_compile_adds_the_include_dir_and_its_bind_only_when_a_header_is_ready() -> None:
    use = PchUse(("-I", JAIL_PCH_DIR), Mounts(binds=(("/h", JAIL_PCH_DIR),)))
    s = JudgeSettings(cxx="c++x", cxx_flags=["-A"])
    payload = {"code": "int main(){}", "tests": [{"stdin": "", "expected_stdout": ""}]}
    for ready, argv, mounts in [
        (use, ["c++x", "-A", "-I", "/jail/pch", "-o", "prog", "main.cpp"], use.mounts),
        (None, ["c++x", "-A", "-o", "prog", "main.cpp"], None),
    ]:
        sb = _Session()
        h = cpp.CompileHandler(sb, s)  # type: ignore[arg-type]
        h.pch = lambda ready=ready: ready  # type: ignore[method-assign]
        out = h.run(StageInput("r", "t", "cpp", "compile", payload, timeout_s=30))
        assert out.status is Status.COMPILE_ERROR
        assert sb.calls == [(argv, mounts)]
