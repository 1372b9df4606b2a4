"""Precompiled ``bits/stdc++.h`` for the C++ compiles of the judged types (``cpp`` and its checkers).

Most competitive-programming C++ opens with ``#include <bits/stdc++.h>``, and parsing it is most
of a compile: g++ -O2 on a typical solution takes about 3 s, 1 s with the header precompiled
(docs/sandbox.md, "Precompiled headers"). The compile then gets ``-I/jail/pch``, a read-only
directory holding nothing but ``bits/stdc++.h.gch``, searched before the system headers:

* g++ loads the ``.gch`` only for ``#include <bits/stdc++.h>`` as the program's first include,
  and only when it was made by the same compiler with the same flags and the macros defined
  before the include agree with it (``-Winvalid-pch`` says why one is not used: a
  ``#define _GLIBCXX_DEBUG`` or ``#define int long long`` first, another ``-std``); otherwise it
  finds no plain header there and goes on to the system's, so a program compiles exactly as it
  would without the directory. No ``-include``: nothing is added to a program that does not ask.
* One header per (compiler identity, exact flags): the identity is the compiler's real path,
  size, modification time and ``--version`` text, so an upgraded compiler gets a new header. A
  compiler that is not GCC (clang only reads precompiled headers named by ``-include-pch``) gets
  none.
* Made once per image by ``python -m distrs.rewards.cxx_pch`` (sandbox/Dockerfile.compile), for
  the default flags, into ``DISTRS_JUDGE_CXX_PCH_IMAGE_DIR`` (under /usr, which only the image
  build writes). A worker with other flags, or outside the image, makes its own in the
  background the first time it is ready, into ``DISTRS_JUDGE_CXX_PCH_DIR`` (default: a directory
  of this user's in the temp dir, shared by the workers of a machine); compiles go on without it
  until it is there. It is made with the system header as the only input and the jail's
  environment, outside the jail: nothing of a request takes part.
* A jail sees the chosen directory bound read-only at ``/jail/pch`` (``Mounts.binds``): outside
  the work dir and ``/tmp``, the only places a program may write. The rlimits fallback, which has
  no jail to bind it in, compiles without it.

``DISTRS_JUDGE_CXX_PCH=0`` turns it off.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distrs.rewards.compile_cache import tool_identity
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.pch_store import PchStore
from distrs.sandbox.base import Mounts, default_env
from distrs.sandbox.local import BWRAP

log = logging.getLogger(__name__)

HEADER = "bits/stdc++.h"
KIND = "cxx-pch/1"
JAIL_PCH_DIR = "/jail/pch"
JAIL_PATH = default_env()["PATH"]  # where the judge's jail finds its compiler
BUILD_TIMEOUT_S = 600.0
PROBE = "#include <bits/stdc++.h>\nint main() { return 0; }\n"


def gcc_identity(cxx: str, path: str = JAIL_PATH) -> str | None:
    """The identity of the GCC C++ compiler ``cxx`` names (looked up in ``path``): its real path,
    size and modification time and its ``--version`` text; None where it is missing or not GCC."""
    found = shutil.which(cxx, path=path)
    if found is None:
        return None
    try:
        r = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=60, env=default_env(), check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return identity_of(tool_identity(cxx, path), r.stdout if r.returncode == 0 else "")


def identity_of(tool: str, version_text: str) -> str | None:
    """``tool`` plus the version text when that text is GCC's (clang's names clang)."""
    first = version_text.strip().splitlines()[0] if version_text.strip() else ""
    if "Free Software Foundation" not in version_text or "clang" in version_text.lower():
        return None
    return f"{tool}\n{first}"


def header_path(stderr: str) -> str | None:
    """The header ``-H`` reports first (``. /usr/include/.../bits/stdc++.h``)."""
    for line in stderr.splitlines():
        if line.startswith(". ") and line.endswith("/" + HEADER):
            return line[2:]
    return None


def pch_used(stderr: str, pch_dir: str) -> bool:
    """Whether ``-H`` output says the precompiled header in ``pch_dir`` was used (``! PATH``)."""
    return f"! {pch_dir.rstrip('/')}/{HEADER}.gch" in stderr.splitlines()


def precompile(cxx: str, flags: Sequence[str], out: Path) -> bool:
    """Make ``out/bits/stdc++.h.gch`` from the system's header with ``flags``, in the judge's
    environment, and keep it only if a compile with the same flags uses it."""
    compiler = shutil.which(cxx, path=JAIL_PATH)
    if compiler is None:
        return False
    with tempfile.TemporaryDirectory(prefix="distrs-pch-build-") as tmp:
        env = default_env({"TMPDIR": tmp})
        (Path(tmp) / "probe.cpp").write_text(PROBE)

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [compiler, *flags, *args],
                stdin=subprocess.DEVNULL,
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )

        found = header_path(run("-H", "-E", "-o", os.devnull, "probe.cpp").stderr)
        if found is None:
            log.warning("%s %s: no %s to precompile", cxx, list(flags), HEADER)
            return False
        (out / "bits").mkdir(parents=True, exist_ok=True)
        made = run("-x", "c++-header", found, "-o", str(out / "bits" / "stdc++.h.gch"))
        if made.returncode != 0:
            log.warning("precompiling %s failed: %s", HEADER, made.stderr[-2000:])
            return False
        probe = run("-Winvalid-pch", "-H", "-I", str(out), "-c", "-o", os.devnull, "probe.cpp")
        if probe.returncode != 0 or not pch_used(probe.stderr, str(out)):
            log.warning("%s made with %s is not used by a compile with them; not kept", HEADER, list(flags))
            return False
    for p in (out, out / "bits"):
        os.chmod(p, 0o755)
    os.chmod(out / "bits" / "stdc++.h.gch", 0o644)
    return True


def default_root() -> str:
    """``TMPDIR/distrs-pch-UID``, private to this user (shared by its workers on this machine);
    "" (a fresh directory of this process) where that name is taken by anyone else or open to
    others, so nobody else can plant a header there."""
    d = Path(tempfile.gettempdir()) / f"distrs-pch-{os.geteuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return ""
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        log.warning("%s is not a private directory of this user; precompiled headers go elsewhere", d)
        return ""
    return str(d)


def store(cxx: str, root: str, image_dir: str) -> PchStore | None:
    """A store for compiler ``cxx`` (None where it is missing or not GCC); :class:`JudgePch`
    keeps one per handler."""
    identity = gcc_identity(cxx)
    if identity is None:
        return None
    return PchStore(
        root or default_root(),
        identity,
        lambda flags, out: precompile(cxx, flags, out),
        header=HEADER,
        kind=KIND,
        prebuilt=(image_dir,),
    )


@dataclass(frozen=True)
class PchUse:
    """What a compile adds to use a precompiled header: flags (before ``-o``) and a bind."""

    args: tuple[str, ...]
    mounts: Mounts


def pch_use(
    cxx: str,
    flags: Sequence[str],
    isolation: str,
    *,
    enabled: bool,
    root: str,
    image_dir: str,
    wait: bool = False,
) -> PchUse | None:
    """The precompiled header for a compile with ``cxx`` and ``flags`` in a sandbox of
    ``isolation``: None where turned off, without a jail, for a compiler that is not GCC, or while
    the header is being made (the first call starts making it)."""
    if not enabled or isolation != BWRAP:
        return None
    return use_of(store(cxx, root, image_dir), flags, wait=wait)


def use_of(s: PchStore | None, flags: Sequence[str], *, wait: bool) -> PchUse | None:
    """The header ``s`` has for ``flags`` (None: no store, or the header is being made)."""
    d = s.get(list(flags), wait=wait) if s is not None else None
    if d is None:
        return None
    return PchUse(("-I", JAIL_PCH_DIR), Mounts(binds=((d, JAIL_PCH_DIR),)))


class JudgePch:
    """The precompiled header of one handler's C++ compiles (``DISTRS_JUDGE_CXX*``): the store is
    made on first use (asking the compiler who it is) and kept by the handler."""

    def __init__(self, settings: JudgeSettings) -> None:
        self._settings = settings
        self._store: PchStore | None = None
        self._made = False

    def use(self, isolation: str, *, wait: bool = False) -> PchUse | None:
        """:func:`pch_use` for the judge's compiler and flags, with the kept store."""
        s = self._settings
        if not s.cxx_pch or isolation != BWRAP:
            return None
        if not self._made:
            self._store = store(s.cxx, s.cxx_pch_dir, s.cxx_pch_image_dir)
            self._made = True
        return use_of(self._store, s.cxx_flags, wait=wait)


def for_judge(settings: JudgeSettings, isolation: str, *, wait: bool = False) -> PchUse | None:
    """:func:`pch_use` for the judge's C++ compiler and flags, once (a handler keeps a
    :class:`JudgePch` instead)."""
    return JudgePch(settings).use(isolation, wait=wait)


def main(argv: Sequence[str]) -> int:
    """``python -m distrs.rewards.cxx_pch DIR``: make the header for the judge's compiler and
    flags (``DISTRS_JUDGE_CXX``, ``DISTRS_JUDGE_CXX_FLAGS``) in ``DIR`` (the image build)."""
    if len(argv) != 1:
        print("usage: python -m distrs.rewards.cxx_pch DIR", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    settings = JudgeSettings()
    s = store(settings.cxx, argv[0], "")
    if s is None:
        print(f"{settings.cxx}: not found or not GCC; nothing precompiled", file=sys.stderr)
        return 1
    d = s.get(settings.cxx_flags, wait=True)
    if d is None:
        return 1
    os.chmod(argv[0], 0o755)
    print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
