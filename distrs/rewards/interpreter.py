"""The python interpreter judged code, checkers, plugins and the math checker run with.

Asked once per interpreter for its prefixes, which are bound read-only into the jail (directories
under ``/usr`` are in every jail already).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

from distrs.sandbox import Mounts


@functools.cache
def interpreter(python: str = "") -> tuple[str, Mounts]:
    """The interpreter path and the host directories it needs inside the jail.

    Asks the (trusted) interpreter itself, once, for ``sys.prefix`` and ``sys.base_prefix``;
    directories under ``/usr`` are in every jail already.
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
