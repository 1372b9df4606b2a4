"""Precompiled bits/stdc++.h through the real jail: used when it fits, ignored when it does not,
the same binaries and verdicts either way, and out of every candidate's reach.

The compile flags carry ``-Winvalid-pch -H`` so a failed compile's output shows what g++ did with
the header (``! /jail/pch/...`` used, ``x /jail/pch/...`` found and not used, and why); the
header is made for exactly these flags, as the judge makes it for its own.
"""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from distrs.core.model import Status
from distrs.rewards import cpp, cxx_pch
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.cxx_pch import JAIL_PCH_DIR, PchUse
from distrs.rewards.interpreter import interpreter
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits, Mounts
from distrs.sandbox.local import LocalSandbox
from tests.integration.sandbox.conftest import assert_no_survivors

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

FLAGS = ["-std=c++17", "-O2", "-pipe", "-Winvalid-pch", "-H"]
USED = f"! {JAIL_PCH_DIR}/bits/stdc++.h.gch"
IGNORED = f"x {JAIL_PCH_DIR}/bits/stdc++.h.gch"
TESTS = [
    {"stdin": "3\n5 1 4\n", "expected_stdout": "10 1 5\n"},
    {"stdin": "1\n7\n", "expected_stdout": "7 7 7\n"},
]
SOLUTION = """
#include <bits/stdc++.h>
using namespace std;
int main() {
    int n; cin >> n; vector<long long> a(n);
    for (auto& x : a) cin >> x;
    sort(a.begin(), a.end());
    cout << accumulate(a.begin(), a.end(), 0LL) << ' ' << a.front() << ' ' << a.back() << '\\n';
}
"""


@pytest.fixture(scope="module")
def pch_settings(tmp_path_factory: pytest.TempPathFactory) -> tuple[JudgeSettings, PchUse]:
    root = tmp_path_factory.mktemp("pch")
    s = JudgeSettings(cxx_flags=FLAGS, cxx_pch_dir=str(root), cxx_pch_image_dir="", test_time_s=5.0)
    use = cxx_pch.for_judge(s, "bwrap", wait=True)
    assert use is not None, "the header was not made (see the log)"
    return s, use


def _inp(stage: str, code: str, artifacts: dict[str, str] | None = None, **extra: Any) -> StageInput:
    payload = {"code": textwrap.dedent(code).lstrip(), "tests": TESTS, **extra}
    return StageInput("r", "t", "cpp", stage, payload, artifacts or {}, timeout_s=60)


def _compile(sb: LocalSandbox, s: JudgeSettings, code: str) -> StageOutput:
    return cpp.CompileHandler(sb, s).run(_inp("compile", code))


def _judge(sb: LocalSandbox, s: JudgeSettings, code: str) -> tuple[StageOutput, str | None]:
    c = _compile(sb, s, code)
    if c.outcome == "final":
        return c, None
    return cpp.RunHandler(sb, s).run(_inp("run", code, c.artifacts)), c.artifacts["binary"]


def _off(s: JudgeSettings) -> JudgeSettings:
    return s.model_copy(update={"cxx_pch": False})


def test_a_bits_stdcxx_program_compiles_with_the_header(
    bwrap_sandbox: LocalSandbox, pch_settings: tuple[JudgeSettings, PchUse]
) -> None:
    s, _ = pch_settings
    out = _compile(bwrap_sandbox, s, SOLUTION.replace("int main() {", "int main() { undeclared_name;"))
    assert out.status is Status.COMPILE_ERROR
    text = out.detail["compiler_output"]
    assert USED in text.splitlines() and "not used" not in text, text[:2000]
    off = _compile(bwrap_sandbox, _off(s), SOLUTION.replace("int main() {", "int main() { undeclared_name;"))
    assert "/jail/pch" not in off.detail["compiler_output"]  # turned off: compiled as before


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (SOLUTION, Status.OK),
        (SOLUTION.replace("a.front()", "a.front() + 1"), Status.WRONG_ANSWER),
        (
            SOLUTION.replace("sort(a.begin(), a.end());", "if (n == 1) abort(); sort(a.begin(), a.end());"),
            None,
        ),
        ("#include <iostream>\nint main(){int n;std::cin>>n;std::cout<<n<<'\\n';}\n", Status.WRONG_ANSWER),
        ('#include <cstdio>\n#include <bits/stdc++.h>\nint main(){ puts("7 7 7"); }\n', Status.WRONG_ANSWER),
    ],
)
def test_the_same_binary_and_verdict_with_and_without_the_header(
    bwrap_sandbox: LocalSandbox, pch_settings: tuple[JudgeSettings, PchUse], code: str, status: Status | None
) -> None:
    s, _ = pch_settings
    on, bin_on = _judge(bwrap_sandbox, s, code)
    off, bin_off = _judge(bwrap_sandbox, _off(s), code)
    assert bin_on is not None and bin_on == bin_off  # byte for byte
    assert on.status is off.status and on.score == off.score
    assert [t["status"] for t in on.detail["tests"]] == [t["status"] for t in off.detail["tests"]]
    if status is not None:
        assert on.status is status, on.detail
    else:
        assert [t["status"] for t in on.detail["tests"]] == ["ok", "runtime_error"]


def test_a_macro_defined_before_the_include_makes_gcc_parse_the_real_header(
    bwrap_sandbox: LocalSandbox, pch_settings: tuple[JudgeSettings, PchUse]
) -> None:
    s, _ = pch_settings
    # libstdc++'s debug mode checks operator[]: it aborts only if the macro reached the headers
    debug = "#define _GLIBCXX_DEBUG\n" + SOLUTION.replace("sort(", "a[n] = 0; sort(")
    broken = debug.replace("int main() {", "int main() { undeclared_name;")
    text = _compile(bwrap_sandbox, s, broken).detail["compiler_output"]
    assert IGNORED in text and "not used because `_GLIBCXX_DEBUG' is defined" in text, text[:2000]
    on, bin_on = _judge(bwrap_sandbox, s, debug)
    off, bin_off = _judge(bwrap_sandbox, _off(s), debug)
    assert on.status is off.status is Status.RUNTIME_ERROR, on.detail
    assert bin_on == bin_off
    # a program that redefines a keyword first is refused by the header, and fails as without it
    ll = "#define int long long\n" + SOLUTION
    on_ll, off_ll = _compile(bwrap_sandbox, s, ll), _compile(bwrap_sandbox, _off(s), ll)
    assert on_ll.status is off_ll.status is Status.COMPILE_ERROR
    assert "not used because `int' is defined" in on_ll.detail["compiler_output"]


def test_other_flags_make_gcc_ignore_the_header_and_compile_as_without_it(
    bwrap_sandbox: LocalSandbox, pch_settings: tuple[JudgeSettings, PchUse]
) -> None:
    _, use = pch_settings
    with bwrap_sandbox.session() as sess:
        sess.write_file("main.cpp", SOLUTION.encode())
        argv = ["g++", "-std=c++14", "-O0", "-Winvalid-pch", "-H"]
        limits = Limits(wall_s=120, memory_bytes=4 << 30, nproc=128, output_bytes=1 << 20)
        with_dir = sess.run([*argv, *use.args, "-o", "a", "main.cpp"], limits=limits, mounts=use.mounts)
        without = sess.run([*argv, "-o", "b", "main.cpp"], limits=limits)
        assert with_dir.ok and without.ok, with_dir.stderr[-2000:]
        err = with_dir.stderr.decode()
        assert IGNORED in err.splitlines() and "not used because" in err
        assert sess.read_file("a", 1 << 24) == sess.read_file("b", 1 << 24)


HOSTILE = r"""
import os, sys
gch = "/jail/pch/bits/stdc++.h.gch"
tries = {
    "write": lambda: open(gch, "r+b").write(b"evil"),
    "truncate": lambda: os.truncate(gch, 0),
    "unlink": lambda: os.unlink(gch),
    "rename": lambda: os.rename(gch, "/jail/work/x"),
    "chmod": lambda: os.chmod(gch, 0o666),
    "new file beside": lambda: open("/jail/pch/bits/evil.gch", "wb"),
    "replace the dir": lambda: os.rename("/jail/pch", "/jail/work/pch"),
    "rmdir": lambda: os.rmdir("/jail/pch/bits"),
    "new dir in /jail": lambda: os.mkdir("/jail/pch2"),
    "symlink in /jail": lambda: os.symlink("/jail/work", "/jail/evil"),
    "move /jail": lambda: os.rename("/jail", "/tmp/jail"),
}
done = []
for name, f in tries.items():
    try:
        f()
        done.append(name)
    except OSError:
        pass
print("safe" if not done and os.path.getsize(gch) > 0 else done)
"""


@pytest.mark.parametrize("open_to_all", [False, True])
def test_a_candidate_can_neither_write_nor_replace_the_header(
    bwrap_sandbox: LocalSandbox, pch_settings: tuple[JudgeSettings, PchUse], tmp_path: Path, open_to_all: bool
) -> None:
    s, use = pch_settings
    binds = use.mounts.binds
    if open_to_all:
        # as if the program's uid owned the files (a worker in a user namespace runs its jails
        # as its own uid): only the read-only bind stands in the way
        copy = tmp_path / "pch"
        shutil.copytree(binds[0][0], copy)
        for p in (copy, copy / "bits"):
            p.chmod(0o777)
        (copy / "bits" / "stdc++.h.gch").chmod(0o666)
        binds = ((str(copy), JAIL_PCH_DIR),)
    host = Path(binds[0][0]) / "bits" / "stdc++.h.gch"
    before = hashlib.sha256(host.read_bytes()).hexdigest()
    exe, py = interpreter("")
    with bwrap_sandbox.session() as sess:  # the compile's own jail, with a hostile program in it
        sess.write_file("h.py", HOSTILE.encode())
        r = sess.run(
            [exe, "-I", "h.py"],
            limits=Limits(wall_s=30, memory_bytes=1 << 30),
            mounts=Mounts(ro_paths=py.ro_paths, binds=binds),
        )
    assert r.stdout.decode().strip() == "safe", (r.stdout, r.stderr[-2000:])
    assert hashlib.sha256(host.read_bytes()).hexdigest() == before
    assert_no_survivors()
    # the run stage's jail does not even see it, nor the host directory it lives in
    probe = f"import os\nprint('safe' if not os.path.exists('/jail/pch') and not os.path.exists({str(host)!r}) else 'seen')\n"
    with bwrap_sandbox.session() as sess:
        sess.write_file("p.py", probe.encode())
        r = sess.run([exe, "-I", "p.py"], limits=Limits(wall_s=30), mounts=py)
    assert r.stdout.decode().strip() == "safe", (r.stdout, r.stderr[-2000:])
    # and the next compile still uses it
    text = _compile(bwrap_sandbox, s, SOLUTION + "\nint broken = undeclared_name;\n").detail[
        "compiler_output"
    ]
    assert USED in text.splitlines()
