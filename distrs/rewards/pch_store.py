"""Precompiled headers kept per (toolchain, flag set), made once per key by whoever asks first.

g++ looks for ``NAME.gch`` beside every ``NAME`` it searches for on the include path and loads it
instead of parsing the header when it was made from the same header with the same options and
the same macros defined; otherwise it ignores it and goes on searching. So a directory holding
only ``HEADER.gch``, put first on the include path, can speed a compile up but never change what
it produces. Both users of this (``cxx_pch.py`` for ``bits/stdc++.h``, ``kernelbench/pch.py``
for ``torch/extension.h``) keep one such directory per key here.

A key is a hash of the toolchain's identity and the exact flags, so a changed compiler or flag
set is another directory, never a stale header. The first :meth:`PchStore.get` of a key in a
process starts one maker thread for it and answers None meanwhile (compiles go on without it);
every later ``get(..., wait=True)`` of that key in the process waits for that same thread.

Several processes may share a root (a compile pool's workers on one machine, or pods on one
volume). One of them makes each header; the others wait for it:

* **One build per key.** A maker claims the key by creating ``.KEY.claim`` atomically (a file
  made aside, locked with ``flock``, then hard-linked into place: ``link`` fails where the name
  exists, so exactly one claim wins, and it is locked before anyone can see it). Only the claim's
  holder precompiles; it builds into ``.KEY.build.PID.TID`` and renames that directory whole
  onto ``KEY``, so a reader finds a complete header or none. It then removes the claim.
* **A dead claimer does not block the key.** A waiter polls the claim with a non-blocking
  ``flock``: the lock is held as long as the claimer's process lives (the kernel releases it
  when the process dies, however it dies). A lock the waiter gets on a claim still linked at its
  name is a claim whose holder died mid-build: the waiter takes it over (it now holds the lock on
  the claim in place), removes the half-made build directories of that key and builds itself.
  The claim also names its holder (host, pid, start time): a holder on this host that still runs
  keeps its claim even where the lock came free, as on a filesystem whose ``flock`` does nothing.
* **A failed build is not retried by every waiter in turn.** A claim removed by its holder with
  no header published means the build failed there; the waiters give up too (compiles go on
  without the header) instead of each failing the same way again.

Read-only ``prebuilt`` roots (made at image build) are looked up first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# (flags, output directory) -> whether the header was made there
Precompile = Callable[[list[str], Path], bool]

POLL_S = 0.2  # how often a waiter looks at another process's claim


def pch_key(kind: str, toolchain: str, flags: Sequence[str]) -> str:
    """The directory name of one (toolchain, flag set)."""
    return hashlib.sha256(json.dumps([kind, toolchain, list(flags)]).encode()).hexdigest()[:32]


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc), or "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


class Claim:
    """The lock on ``.KEY.claim``: held by exactly one live process per key."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def take(cls, path: Path) -> Claim | None:
        """A new claim at ``path``, or None where one exists (live or left by a dead process)."""
        aside = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(aside, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # locked before anyone can open it under its name
            os.write(fd, f"{socket.gethostname()} {os.getpid()} {_started(os.getpid())}\n".encode())
            try:
                os.link(aside, path)
            except FileExistsError:
                os.close(fd)
                return None
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(aside)
        return cls(path, fd)

    @classmethod
    def take_over(cls, path: Path) -> Claim | None:
        """The claim at ``path`` where its holder died (its lock is free while it is still
        linked there); None while it is held, or once its holder removed it."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (unlinked, then unlocked) by a holder that finished
            os.close(fd)
            return None
        claim = cls(path, fd)
        if claim.holder_alive():  # its lock is free, yet it lives: a filesystem whose flock does nothing
            os.close(fd)
            return None
        return claim

    def holder_alive(self) -> bool:
        """Whether the process that wrote the claim still runs on this host (same pid, same start)."""
        parts = self.holder().split()
        if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
            return False
        started = _started(int(parts[1]))
        return started != "" and started == parts[2]

    def holder(self) -> str:
        with contextlib.suppress(OSError):
            return os.pread(self._fd, 200, 0).decode(errors="replace").strip()
        return "?"

    def release(self) -> None:
        """Unlinked first, then unlocked: a waiter that gets the lock afterwards sees it gone."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)


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
        self._makers: dict[str, threading.Thread] = {}

    @property
    def root(self) -> Path:
        """The directory holding this store's headers (one directory per key)."""
        return self._root

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

    def get(self, flags: Sequence[str], *, wait: bool = False, wait_s: float | None = None) -> str | None:
        """The directory to put first on the include path, or None while it is being made (or
        could not be made). The first call for a key starts making it; ``wait`` waits for that
        (at most ``wait_s`` seconds where given)."""
        found = self.find(flags)
        if found is not None:
            return found
        key = self.key(flags)
        with self._lock:
            maker = self._makers.get(key)
            if maker is None:
                maker = threading.Thread(
                    target=self._make, args=(list(flags),), name=self._kind.split("/")[0], daemon=True
                )
                self._makers[key] = maker
                maker.start()
        if wait:
            maker.join(wait_s)
            return self.find(flags)
        return None

    def _make(self, flags: list[str]) -> None:
        d = self.path(flags)
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            claim = self._claim(d)
            if claim is None:
                return
            try:
                if not self._ready(d):  # published by another process since this one looked
                    self._build(flags, d)
            finally:
                claim.release()
        except OSError as e:
            log.warning("could not keep a precompiled %s in %s: %s", self._header, d, e)
        except Exception:
            log.exception("precompiling %s failed; compiles go on without it", self._header)

    def _claim(self, d: Path) -> Claim | None:
        """This process's claim on ``d``'s key, or None where the header got made (or failed) elsewhere."""
        path = d.with_name(f".{d.name}.claim")
        seen_holder = False
        while not self._ready(d):
            if seen_holder and not os.path.lexists(path):
                # its holder removed it and published nothing: the build failed there
                log.info("precompiling %s failed in another process; compiles go on without it", d)
                return None
            claim = Claim.take(path)
            if claim is not None:
                return claim
            stale = Claim.take_over(path)
            if stale is not None:
                log.warning("taking over the precompile of %s from a dead claimer (%s)", d, stale.holder())
                for left in self._root.glob(f".{d.name}.build.*"):
                    shutil.rmtree(left, ignore_errors=True)
                return stale
            seen_holder = True
            time.sleep(POLL_S)
        return None

    def _build(self, flags: list[str], d: Path) -> None:
        tmp = d.with_name(f".{d.name}.build.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.mkdir()
            made = self._precompile(flags, tmp)
            gch = tmp / (self._header + ".gch")
            if made and gch.is_file() and gch.stat().st_size > 0:
                shutil.rmtree(d, ignore_errors=True)  # never a published header: only a leftover
                os.replace(tmp, d)
                log.info("precompiled %s for flags %s in %s", self._header, flags, d)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
