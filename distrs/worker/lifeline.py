"""A local worker host ends with the process that started it, whatever its workers are doing.

``distrs up`` starts one worker host per stage (``distrs/actuators/local.py``), each in a session
of its own so a Ctrl-C at the terminal reaches only ``distrs up``, which then drains them. A
drain lets a busy worker finish its lease, and a lease can be a kernel build of minutes; if
``distrs up`` is killed meanwhile (SIGKILL: no handler runs, nothing is closed in order), the
host and the jails it runs would build on, in sessions of their own, with nobody to report to.

The lifeline: the starting process keeps the write end of a pipe and hands the read end to the
host (``--lifeline-fd``). Nobody writes to it; when the write end closes, the host's watcher
thread reads end of file and the host ends at once with everything it started. The kernel
closes the write end however its holder ends (exit, SIGKILL, a crash), and the holder closes it
on purpose when a drain runs out of time. Why this and not the alternatives:

* ``PR_SET_PDEATHSIG`` fires when the parent *thread* ends, not the parent process, so it would
  tie the host to whichever thread of ``distrs up`` happened to start it; and it delivers a
  signal to the host alone, killing it before it can end the jails it started.
* stdin already carries the resize commands, and its end of file means "drain": a draining host
  is exactly the one that must still notice its parent's death, so the two cannot share a pipe.
* A cgroup per host would hold every descendant, but the service cannot count on being able to
  create one (no delegated cgroup v2 in many containers; the sandbox's run cgroups, where it has
  them, hold single runs, not the host).
* Polling ``getppid()`` costs wake-ups for nothing and only notices late.

Ending the host's processes is ``tree_kill``'s job: each jail is a ``bwrap`` in a session of its
own, some drop the parent-death signal with their uid, and the degraded backend has no PID
namespace, so neither the host's process group nor bwrap's ``--die-with-parent`` reach them all.
The killer runs as a separate process that stops the host first (so no worker thread starts a
jail behind its back), stops and kills every descendant, then the host. Where it cannot start,
the host does the same from its own thread, then exits. Ancestry is the one limit: a program
of the degraded ``rlimits`` backend that daemonized before (its parent gone, so reparented to
init) is no longer in the tree; the sandbox ends those by their uid after each run, which a host
ended mid-run does not reach. Under bwrap an orphan is reparented to its jail's init, which is
in the tree.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from distrs.worker import tree_kill

log = logging.getLogger(__name__)

# A host whose lifeline broke and whose killer did not end it (it ends itself).
EXIT_PARENT_GONE = 70


def watch(fd: int, on_gone: Callable[[], object]) -> threading.Thread:
    """Call ``on_gone`` (from a daemon thread) once ``fd`` reads end of file.

    Raises ``ValueError`` where ``fd`` is not an open descriptor. The descriptor is kept out of
    the processes this one starts."""
    try:
        os.fstat(fd)
    except OSError as e:
        raise ValueError(f"lifeline descriptor {fd} is not open: {e}") from e
    os.set_inheritable(fd, False)
    thread = threading.Thread(target=_wait_eof, args=(fd, on_gone), name="lifeline", daemon=True)
    thread.start()
    return thread


def _wait_eof(fd: int, on_gone: Callable[[], object]) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except OSError:  # the descriptor went bad: there is no parent to trust either
            break
    on_gone()


def end_tree() -> NoReturn:
    """End this process and every process it started, now (see the module docstring)."""
    log.error("the process that started this worker is gone: ending it and every process it started")
    try:
        killer = subprocess.Popen(
            [sys.executable, "-I", "-S", tree_kill.__file__, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            close_fds=True,
        )
        killer.wait()  # it stops and then kills this process: returning means it failed
        log.error("the process killer exited with %s; ending the processes from here", killer.returncode)
    except OSError as e:
        log.error("could not start the process killer (%s); ending the processes from here", e)
    tree_kill.kill_tree(os.getpid())
    os._exit(EXIT_PARENT_GONE)
