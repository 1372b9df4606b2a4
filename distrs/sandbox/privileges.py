"""What this worker process may do to build jails: switch uids, mount filesystems, own a userns.

Three situations occur in practice, and the jail is built differently in each:

* ``pool``: the worker can become other uids (real root on a host, or root of a user-namespaced
  pod whose uid map covers the sandbox uid pool). Every run gets its own uid from the pool, so
  a program never shares a uid with the worker or with another run.
* ``private``: the worker is root only inside a user namespace of its own with a single mapped
  uid (a non-root pod: ``distrs worker`` re-enters itself through ``unshare --user
  --map-root-user --mount`` at start-up, see ``distrs/worker/isolation.py``). It can mount
  (per-session tmpfs quotas) but every uid maps to the worker's; the program runs as uid 65534
  inside a further user namespace, cut off from the worker by PID, mount and network namespaces.
* ``plain``: neither (a non-root process outside its own namespace): bwrap makes the user
  namespace, but the worker cannot mount quota'd work dirs.

Pure functions over ``/proc/self`` facts, so tests can table-drive them.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

CAP_SETUID = 7
CAP_SYS_ADMIN = 21

POOL = "pool"
PRIVATE = "private"
PLAIN = "plain"


@dataclass(frozen=True)
class IdMap:
    """One line of /proc/PID/uid_map: ``inside`` .. ``inside+count`` map to ``outside`` ..."""

    inside: int
    outside: int
    count: int


def parse_id_map(text: str) -> list[IdMap]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append(IdMap(int(parts[0]), int(parts[1]), int(parts[2])))
    return out


def covers(maps: list[IdMap], first: int, count: int) -> bool:
    """Every id in [first, first+count) is mapped."""
    return all(any(m.inside <= i < m.inside + m.count for m in maps) for i in (first, first + count - 1))


def has_cap(cap_eff_hex: str, cap: int) -> bool:
    return bool(int(cap_eff_hex, 16) >> cap & 1)


def classify(euid: int, cap_eff_hex: str, uid_map: str, pool_base: int, pool_count: int) -> str:
    """``pool``, ``private`` or ``plain`` (see the module docstring)."""
    maps = parse_id_map(uid_map)
    if euid == 0 and has_cap(cap_eff_hex, CAP_SETUID) and covers(maps, pool_base, pool_count):
        return POOL
    if euid == 0 and has_cap(cap_eff_hex, CAP_SYS_ADMIN):
        return PRIVATE
    return PLAIN


def _cap_eff() -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return line.split()[1]
    return "0"


def current(pool_base: int, pool_count: int) -> str:
    """The situation of this process."""
    return classify(os.geteuid(), _cap_eff(), Path("/proc/self/uid_map").read_text(), pool_base, pool_count)


# ------------------------------------------------------------------ mounting session quotas

_MNT_DETACH = 2
_MS_NOSUID = 2
_MS_NODEV = 4


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def mount_tmpfs(target: Path, *, size_bytes: int, inodes: int, uid: int, gid: int) -> None:
    """A tmpfs of at most ``size_bytes`` and ``inodes`` files at ``target``, owned by uid/gid.

    mount(2) directly rather than util-linux ``mount``: one system call instead of a process
    start per session. OSError when the caller may not mount.
    """
    opts = f"size={size_bytes},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}"
    libc = _libc()
    if libc.mount(b"distrs-run", str(target).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def unmount(target: Path) -> None:
    """Detach ``target`` (lazily: a straggling process cannot keep it busy)."""
    libc = _libc()
    if libc.umount2(str(target).encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")
