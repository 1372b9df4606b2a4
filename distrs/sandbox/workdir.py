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
