"""Nested paths in a session's work dir: written with their directories, never through a
symlink, read back only as regular files reached without following one (``sandbox/workdir.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from distrs.sandbox.workdir import read_beneath, write_beneath


def test_nested_write_creates_directories_and_reads_back(tmp_path: Path) -> None:
    p = write_beneath(tmp_path, "dir1/dir2/dir3/secret_flag", b"hello", mode=0o644, owner=None)
    assert p.read_bytes() == b"hello" and (tmp_path / "dir1" / "dir2").is_dir()
    assert read_beneath(tmp_path, "dir1/dir2/dir3/secret_flag", 100) == b"hello"
    assert read_beneath(tmp_path, "dir1/dir2/dir3/secret_flag", 3) is None  # over the size cap
    assert read_beneath(tmp_path, "dir1/missing", 100) is None


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"host secret")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside, work / "link")  # a directory symlink planted by a program
    os.symlink(outside / "secret", work / "leak")  # a file symlink
    assert read_beneath(work, "link/secret", 100) is None
    assert read_beneath(work, "leak", 100) is None
    with pytest.raises(OSError):
        write_beneath(work, "link/planted", b"x", mode=0o644, owner=None)
    with pytest.raises(OSError):
        write_beneath(work, "leak", b"x", mode=0o644, owner=None)
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_bytes() == b"host secret"


def test_a_file_where_a_directory_should_be_is_an_error(tmp_path: Path) -> None:
    write_beneath(tmp_path, "a", b"x", mode=0o644, owner=None)
    with pytest.raises(OSError):
        write_beneath(tmp_path, "a/b", b"y", mode=0o644, owner=None)
