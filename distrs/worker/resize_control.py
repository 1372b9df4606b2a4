"""How a host process of workers is told its size: the one loop both hosts run.

The local actuator writes the planner's count to a host's stdin, one number per line, and reads
``ready N`` back (``host.py`` for stage workers, ``session_host.py`` for session workers). EOF,
SIGTERM or SIGINT ends the loop and the host stops its workers its own way (a drain for stage
workers, a grace period for sessions); a second SIGTERM then cannot cut that stop short.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import TextIO

log = logging.getLogger(__name__)


def serve_counts(commands: TextIO, out: TextIO, resize: Callable[[int], int], who: str) -> None:
    """Resize on each line of ``commands`` until EOF, answering ``ready N``; a line that is not a
    number is logged and skipped."""
    for line in commands:
        line = line.strip()
        if not line:
            continue
        try:
            n = int(line)
        except ValueError:
            log.error("%s: bad command %r (expected a number of workers)", who, line)
            continue
        out.write(f"ready {resize(n)}\n")
        out.flush()


class _Stop(Exception):
    pass


def _raise_stop(*_: object) -> None:
    raise _Stop


def run_resized(
    resize: Callable[[int], int], initial: int, control: TextIO | None, stop: Callable[[], None], who: str
) -> None:
    """``initial`` workers; resized from ``control`` lines if given, else until SIGTERM/SIGINT;
    then ``stop()``."""
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    resize(initial)
    try:
        if control is not None:
            serve_counts(control, sys.stdout, resize, who)
        else:
            threading.Event().wait()
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not cut the stop short
        stop()
