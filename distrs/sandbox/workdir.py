"""Fresh private work directories: created 0700 for the run's owner, removed with all contents."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path


def make_workdir(base: Path, owner: int | None) -> Path:
    """A new empty directory under ``base`` that only ``owner`` (or we) can enter.

    Its name starts ``run-<owner>-`` (``run-x-`` without one), so the sessions of a uid that no
    live process holds can be found and reaped after a worker was killed.
    """
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o711)  # traversable, not listable: run dirs are not discoverable
    tag = "x" if owner is None else str(owner)
    path = Path(tempfile.mkdtemp(prefix=f"run-{tag}-", dir=base))
    if owner is not None:
        os.chown(path, owner, owner)
    os.chmod(path, 0o700)
    return path


def chown_tree(path: Path, owner: int) -> None:
    """Hand files written by the worker (sources, binaries) to the run's uid."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), owner, owner, follow_symlinks=False)
    os.chown(path, owner, owner)


def remove_workdir(path: Path) -> None:
    """Remove ``path`` even if the program chmod-ed parts of it unreadable."""

    def fix(func: object, p: str, _exc: object) -> None:
        try:
            parent = os.path.dirname(p)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)


def _walk_dirs(root: Path, parts: list[str], *, create: bool, owner: int | None) -> int:
    """An fd of ``root/parts[0]/.../parts[-1]`` opened without following any symlink (a program
    may have planted one to point a path at a host file); ``create`` makes missing directories
    (0755, owned by ``owner``). OSError when a component is missing, a symlink or not a dir."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, owner, owner, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_beneath(root: Path, rel: str, data: bytes, *, mode: int, owner: int | None) -> Path:
    """Write ``data`` to ``root/rel`` (``rel`` a relative path of plain components, checked by the
    caller), creating its directories; never through a symlink. OSError on a clash (a directory
    where the file should go, a file where a directory should)."""
    *dirs, name = rel.split("/")
    dfd = _walk_dirs(root, dirs, create=True, owner=owner)
    try:
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd
        )
        try:
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, owner, owner)
            with os.fdopen(os.dup(fd), "wb") as f:
                f.write(data)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    return root / rel


def read_beneath(root: Path, rel: str, max_bytes: int) -> bytes | None:
    """The regular file ``root/rel``, reached without following any symlink; None when it is
    missing, not a regular file, behind a symlink, or larger than ``max_bytes``."""
    *dirs, name = rel.split("/")
    try:
        dfd = _walk_dirs(root, dirs, create=False, owner=None)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return None
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)
        return data if len(data) <= max_bytes else None
    finally:
        os.close(fd)
