"""A session that hands everything to another one: the base of sessions that change one thing.

The fork server (``forkserver.py``) and the exec timer (``exec_timer.py``) each change how a run
is made and nothing else; this keeps the rest of :class:`~distrs.sandbox.base.Session` in one
place instead of a copy in each.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from distrs.sandbox.base import Helper, Limits, Mounts, RunResult, Session


class SessionWrapper:
    """Every :class:`Session` call goes to ``session``; subclasses override what they change."""

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def path(self) -> Path:
        return self._session.path

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        return self._session.write_file(name, data, executable=executable)

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        return self._session.read_file(name, max_bytes)

    def run(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> RunResult:
        return self._session.run(argv, limits=limits, stdin=stdin, env=env, mounts=mounts, fds=fds)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
    ) -> subprocess.Popen[bytes]:
        return self._session.spawn(argv, limits=limits, env=env, mounts=mounts)

    def start(
        self,
        argv: Sequence[str],
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        mounts: Mounts | None = None,
        fds: tuple[int, ...] = (),
    ) -> Helper:
        return self._session.start(argv, limits=limits, env=env, mounts=mounts, fds=fds)
