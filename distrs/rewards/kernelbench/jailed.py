"""The host's end of one jailed ``judge_process.py``: commands out, strictly parsed replies back.

Each reply must come before its deadline, be one JSON object, and carry at most the bytes it
announced (bounded). A child that exits, stalls or writes anything else raises
:class:`ChildGone` or :class:`ChildTimeout`; the caller decides whose fault that is (the
candidate's, if the candidate's child; the service's, if the reference's). Replies are never
pipelined: one command in flight at a time.
"""

from __future__ import annotations

import json
import os
import selectors
import time
from contextlib import suppress
from typing import Any

from distrs.sandbox.base import Helper

MAX_LINE = 1 << 20


class ChildGone(Exception):
    """The child exited or broke the protocol."""


class ChildTimeout(Exception):
    """No reply before the deadline."""


class JailedChild:
    def __init__(self, helper: Helper, max_blob: int) -> None:
        self._helper = helper
        self._max_blob = max_blob
        proc = helper.proc
        assert proc.stdout is not None and proc.stdin is not None
        self._fd = proc.stdout.fileno()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._fd, selectors.EVENT_READ)
        self._buf = bytearray()

    def _fill(self, need: int, deadline: float) -> None:
        while len(self._buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout
            if not self._sel.select(left):
                continue
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                raise ChildGone("the process exited")
            self._buf += chunk

    def _line(self, deadline: float) -> bytes:
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            if len(self._buf) > MAX_LINE:
                raise ChildGone("an oversized reply line")
            self._fill(len(self._buf) + 1, deadline)

    def send(self, cmd: dict[str, Any]) -> None:
        stdin = self._helper.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(cmd).encode() + b"\n")
            stdin.flush()
        except OSError as e:
            raise ChildGone(f"cannot write to it: {e}") from None

    def recv_object(self, deadline: float) -> dict[str, Any]:
        """One JSON object line."""
        try:
            msg = json.loads(self._line(deadline))
        except ValueError:
            raise ChildGone("a reply that is not JSON") from None
        if not isinstance(msg, dict):
            raise ChildGone("a reply that is not an object")
        return msg

    def recv(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        """One reply: (status object, blob)."""
        msg = self.recv_object(deadline)
        if not isinstance(msg.get("ok"), bool):
            raise ChildGone("a reply that is not a status object")
        n = msg.get("nbytes", 0)
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self._max_blob:
            raise ChildGone(f"a reply announcing {n!r} bytes (at most {self._max_blob})")
        self._fill(n, deadline)
        blob = bytes(self._buf[:n])
        del self._buf[:n]
        return msg, blob

    def ask(self, cmd: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], bytes]:
        if self._buf or self._sel.select(0):
            raise ChildGone("it wrote before it was asked")
        self.send(cmd)
        return self.recv(time.monotonic() + timeout_s)

    def close(self) -> None:
        with suppress(Exception):
            self._sel.close()
        self._helper.kill()
