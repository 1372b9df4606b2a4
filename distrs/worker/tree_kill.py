"""End a process and every process it started, whichever session or namespace they moved to.

A worker host's descendants do not share one handle the kernel could kill at once: each jail is
a ``bwrap`` in a session of its own, a jail's init may have dropped to a pool uid (which clears
bwrap's parent-death signal), a zygote forks request servers that call ``setsid``, and the
degraded ``rlimits`` backend has no PID namespace to tear down. What they do share is ancestry:
until a parent dies, every one of them is a descendant of the host in ``/proc``. So the tree is
ended in an order that keeps it whole:

1. stop the root (``SIGSTOP`` stops all its threads, so it starts nothing more);
2. stop its descendants, rescanning until a scan finds nothing new and every stopped process is
   stopped for real (a process stopped while it forks leaves its child in the next scan; a
   stopped process can neither fork nor leave, so the set stops growing);
3. ``SIGKILL`` the descendants, then the root. Killing a parent before its children are stopped
   would reparent them to init, out of the tree and out of reach.

The kernel does the rest: a jail's PID namespace ends with its init, and bwrap's
``--die-with-parent`` covers what is left of a jail whose bwrap is gone.

Only the standard library, and runnable as a script (``python -S tree_kill.py PID``): a worker
host runs it as a separate process, so the host can be stopped first and the killer is not
stopped with it (``distrs/worker/lifeline.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

# How long stopped processes get to reach the stopped state (one in uninterruptible sleep may
# take a moment); past it the kill goes ahead with what was found.
SETTLE_S = 2.0
_GONE = frozenset("ZXx")  # zombie or dead: nothing left to stop or kill
_STOPPED = frozenset("Tt")


def _stat(pid: int, proc: str) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid``, or None once it is gone."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(root: int, proc: str = "/proc", exclude: frozenset[int] = frozenset()) -> list[int]:
    """Every live descendant of ``root`` (a parent before its children), ``exclude`` and their
    subtrees left out. A child of any of a process's threads names the process as its parent."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        st = _stat(int(name), proc)
        if st is not None and st[0] not in _GONE:
            children.setdefault(st[1], []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            if child not in exclude:
                out.append(child)
                todo.append(child)
    return out


def _settled(pids: set[int], proc: str) -> bool:
    """Every thread of every process in ``pids`` is stopped (or the process is gone)."""
    for pid in pids:
        try:
            tids = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            st = _stat(int(tid), f"{proc}/{pid}/task")
            if st is not None and st[0] not in _STOPPED and st[0] not in _GONE:
                return False
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop_tree(root: int, proc: str = "/proc", settle_s: float = SETTLE_S) -> list[int]:
    """Stop ``root`` (unless it is this process) and all its descendants but this process;
    returns the descendants stopped, parents first."""
    me = frozenset({os.getpid()})
    if root != os.getpid():
        _signal(root, signal.SIGSTOP)
    stopped: list[int] = []
    seen: set[int] = set()
    deadline = time.monotonic() + settle_s
    others = set() if root == os.getpid() else {root}
    while True:
        # Settled before the scan: then no process seen so far can add a child after it.
        settled = _settled(seen | others, proc) or time.monotonic() > deadline
        fresh = [p for p in descendants(root, proc, me) if p not in seen]
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped += fresh
        seen.update(fresh)
        if not fresh and settled:
            return stopped
        if not fresh:
            time.sleep(0.005)


def kill_tree(root: int, proc: str = "/proc", settle_s: float = SETTLE_S) -> list[int]:
    """Stop, then kill, ``root``'s descendants and then ``root`` itself (this process is spared,
    so a process may end its own tree and then exit). Returns the descendants killed."""
    stopped = stop_tree(root, proc, settle_s)
    # Children first: a parent killed first could orphan a process group with stopped members,
    # which the kernel answers with SIGCONT, letting them run before their own SIGKILL.
    for pid in reversed(stopped):
        _signal(pid, signal.SIGKILL)
    if root != os.getpid():
        _signal(root, signal.SIGKILL)
    return stopped


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: tree_kill.py PID", file=sys.stderr)
        return 2
    kill_tree(int(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
