"""The timer a timed program runs under, inside its jail: ``python -I -S -c SOURCE FD NS PROGRAM...``.

Why: the host's clock around a run includes the jail's own start and end (namespaces, mounts,
uid switch, rlimits: about 20 ms and most of the noise of a short program on a loaded machine).
This process starts last in the jail, notes the monotonic clock, forks, and the child execs
the program; when the program has exited it writes the nanoseconds in between to FD (a pipe
only the host reads) and ends as the program ended (its exit code, or the same signal), so the
run's status is the program's. FD gets ``S`` just before the fork and ``<ns>\n`` after the
program ended (``U`` instead where the program runs untimed), so the host can tell a timer that
never started the program (nothing written: the service's fault) from one the program stopped.

The program runs as the same uid, so the timer keeps it out:

* FD is close-on-exec before the fork: the program never holds it.
* The timer makes itself non-dumpable first, so a process of the same uid without
  CAP_SYS_PTRACE can neither trace it nor open its memory or fds through ``/proc``. Where that
  fails, it execs the program untimed.
* Where the jail has a PID namespace of its own (``NS`` is ``1``), the timer kills every process
  left in it once the program has exited, before it reports: work a program hands to a process
  that outlives it is cut off when its time is taken, not some milliseconds later with the jail.
  (Without one, the degraded rlimits backend, that would reach the worker's own processes.)
* All the program can do is kill or stop the timer: then nothing (or nothing whole) reaches
  FD and the host charges the jail's whole wall time, which is never less.

Runs with ``-I -S``: nothing of distrs, nothing of site-packages, only ``os``, ``signal``,
``time``, ``contextlib`` and ``ctypes``.
"""

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_DUMPABLE = 4


def non_dumpable():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def end_as(status):
    """Exit with the program's exit code, or die of its signal."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(argv):
    fd, own_pid_namespace, program = int(argv[1]), argv[2] == "1", argv[3:]
    os.set_inheritable(fd, False)
    try:
        non_dumpable()
    except OSError:
        os.write(fd, b"U")
        os.close(fd)
        os.execv(program[0], program)
    os.write(fd, b"S")
    t0 = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(program[0], program)
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, 0)
    elapsed = time.monotonic_ns() - t0
    if own_pid_namespace:  # what the program left running dies now, not with the jail later
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    try:
        os.write(fd, b"%d\n" % elapsed)
        os.close(fd)
    except OSError:
        pass
    end_as(status)


if __name__ == "__main__":
    main(sys.argv)
