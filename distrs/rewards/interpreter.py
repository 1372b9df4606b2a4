"""The python interpreter judged code, checkers, plugins and the math checker run with.

The interpreter is asked for its prefixes, which are bound read-only into the jail (directories
under ``/usr`` are in every jail already). :class:`Interpreter` asks once and keeps the answer; a
handler holds one for the interpreter its settings name (the worker's image does not change under
it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from distrs.sandbox import Mounts


def interpreter(python: str = "") -> tuple[str, Mounts]:
    """The interpreter path and the host directories it needs inside the jail.

    Asks the (trusted) interpreter itself for ``sys.prefix`` and ``sys.base_prefix``; directories
    under ``/usr`` are in every jail already.
    """
    exe = python or sys.executable
    out = subprocess.run(
        [exe, "-I", "-c", "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix]))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    prefixes = {os.path.realpath(p) for p in json.loads(out)} | set(json.loads(out))
    ro = tuple(sorted(p for p in prefixes if not p.startswith("/usr/")))
    return exe, Mounts(ro_paths=ro)


class Interpreter:
    """:func:`interpreter` of one setting (empty: the worker's own), asked on first use and kept.
    A failure is not kept: the next call asks again."""

    def __init__(self, python: str = "") -> None:
        self.python = python
        self._found: tuple[str, Mounts] | None = None

    def get(self) -> tuple[str, Mounts]:
        """(path, mounts); OSError, SubprocessError or ValueError where it cannot be asked."""
        if self._found is None:
            self._found = interpreter(self.python)
        return self._found
