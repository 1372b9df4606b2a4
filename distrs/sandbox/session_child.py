"""The jailed side of a stateful session: a supervisor (the jail's init) and the kernel it runs.

A session is one jail that lives across many calls (docs/sessions.md). It is forked from a warm
zygote (``zygote.py``: fresh namespaces, the session's own uid, tmpfs, cgroup, rlimits and seccomp
filter) and runs this program, standalone on purpose (it imports nothing of distrs, which is not
in the jail), as the init of the session's PID namespace. It never runs the session's code
itself: it forks a *kernel* that does, so that a runaway exec can be cut without losing the
supervisor, and the host only ever speaks to the supervisor.

* ``python``: the kernel is a fork of this warm interpreter (no interpreter start per session or
  per exec) that keeps one ``__main__`` namespace across execs, REPL style: the trailing
  expression statement of a cell is evaluated and its ``repr`` returned as ``value`` (nothing for
  None or for a cell ending in ``;``, as Jupyter shows it), ``_`` is the last value, and an
  exception comes back as its type, message and traceback (the cell's own frames only).
* ``bash``: the kernel is one ``bash --noprofile --norc`` reading commands from a pipe; each exec
  is ``{ . CELL; } <STDIN`` in that shell, so its working directory, environment, shell variables
  and functions carry over, and its status is ``exit_code``.

Both write stdout and stderr into pipes the supervisor reads (up to ``output_bytes`` each per
exec; the rest is counted and dropped). An exec past ``timeout_s`` of wall time, or past
``exec_cpu_s`` of CPU time, is cut: every process of the jail but the supervisor gets SIGINT (the
python kernel raises KeyboardInterrupt inside the cell; bash returns from the cell through a
trap) and the state survives; one that does not stop within ``interrupt_grace_s`` is killed with
every process of the jail and the kernel is started afresh (files are kept, the interpreter state
is not). Such a loss is reported on the exec that was cut and on the next one
(``state_survived`` false), never silently. The CPU time of every exec is added up; past
``total_cpu_s`` the session ends (``ended: "cpu_total"``). CPU time is read from the jail's own
``/proc`` (every process of the jail, the reaped ones through the supervisor's children's times);
a jail without ``/proc`` has only the rlimit the zygote set.

The kernel cannot reach the supervisor: the supervisor is the namespace's init and installs no
handler for any signal a process of the jail could send it (the kernel only gets SIGCHLD's
default), it is non-dumpable (no ptrace, no ``/proc/1/fd``), and its socket to the host is never
inherited. What the kernel can do is ruin its own session (write into the status pipe, say): the
supervisor parses strictly and treats anything malformed as the kernel's death.

Protocol on fds 0 and 1 (the host's socket, or a helper's pipes)::

    supervisor -> host  b"H session/1\\n"                       once, when the kernel is up
    host -> supervisor  b"C LENGTH\\n" + JSON command          {"op": "exec"|"test"|"state"|"close", ...}
    supervisor -> host  b"A LENGTH\\n" + JSON answer

Started as ``python -I -B -c SOURCE LANGUAGE CONFIG_JSON`` (``distrs/sandbox/stateful.py``).
"""

import contextlib
import ctypes
import io
import json
import os
import secrets
import select
import signal
import sys
import time

if "python_kernel" not in globals():  # imported as a module; in the jail session_kernel.py comes first
    from distrs.sandbox.session_kernel import (
        CHUNK,
        CTL_FD,
        JAIL_WORKDIR,
        PROTOCOL,
        _write_all,
        python_kernel,
        read_frame,
        write_frame,
    )

PRIVATE_DIR = "/tmp/.distrs-session"  # the cell and stdin files of bash execs
PR_SET_DUMPABLE = 4
TICK_S = 0.05  # how often a running exec's CPU time is read

# -- the supervisor ---------------------------------------------------------------------------


def _proc_times(pid):
    """utime+stime+cutime+cstime of ``pid`` in seconds (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (ValueError, IndexError):
        return 0.0


def jail_cpu_s():
    """CPU seconds used by every process of the jail but this one, reaped ones included."""
    t = os.times()
    total = t.children_user + t.children_system
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]
    except OSError:
        return total
    return total + sum(_proc_times(p) for p in pids)


def kill_jail(sig):
    """Send ``sig`` to every process of the jail but this one (we are its init)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, sig)


def reap_all(block_s=0.0):
    """Reap finished children; with ``block_s``, until none is left or the time is up."""
    deadline = time.monotonic() + block_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.002)


class Output:
    """One stream of an exec, kept up to ``cap`` bytes."""

    def __init__(self, cap):
        self.cap, self.data, self.dropped = cap, bytearray(), 0

    def add(self, chunk):
        room = self.cap - len(self.data)
        self.data += chunk[: max(0, room)]
        self.dropped += max(0, len(chunk) - max(0, room))

    def text(self):
        return self.data.decode("utf-8", errors="replace")


class Kernel:
    """The session's kernel as the supervisor drives it (module docstring)."""

    def __init__(self, language, config):
        self.language = language
        self.cfg = config
        self.pid = None
        self.restarts = 0
        self.carry_loss = False  # the state was lost and the next exec must say so
        self.cpu_total = 0.0
        self.execs = 0
        os.makedirs(PRIVATE_DIR, mode=0o700, exist_ok=True)

    # start and stop -------------------------------------------------------------------------
    def start(self):
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        if self.language == "python":
            parent, child = _socketpair()
        else:
            child, parent = os.pipe()  # bash reads commands from ``child``
            self.status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                if self.language == "python":
                    os.dup2(child, CTL_FD)
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.closerange(CTL_FD + 1, 1 << 16)
                    os.set_inheritable(CTL_FD, False)
                    _set_dumpable(1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    python_kernel()
                else:
                    os.dup2(child, 0)
                    os.dup2(status_w, CTL_FD)
                    os.closerange(CTL_FD + 1, 1 << 16)
                    os.execve("/bin/bash", ["bash", "--noprofile", "--norc"], os.environ)
            finally:
                os._exit(127)
        for fd in (out_w, err_w, child):
            os.close(fd)
        if self.language == "bash":
            os.close(status_w)
            self.cmd_w = parent
            _write_all(parent, b"trap 'return 130 2>/dev/null' INT\n")
        else:
            self.ctl = parent
        self.pid = pid
        for fd in (self.out_r, self.err_r):
            os.set_blocking(fd, False)

    def stop(self):
        """Kill every process of the jail and close the kernel's pipes (files are kept)."""
        kill_jail(signal.SIGKILL)
        reap_all(block_s=1.0)
        fds = [self.out_r, self.err_r] + (
            [self.ctl] if self.language == "python" else [self.cmd_w, self.status_r]
        )
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pid = None

    def restart(self):
        self.stop()
        self.start()
        self.restarts += 1
        self.carry_loss = True

    # one exec -------------------------------------------------------------------------------
    def run(self, cmd):
        test = cmd.get("op") == "test"
        survived = not self.carry_loss
        self.carry_loss = False
        if self.pid is None:
            self.start()
        stdin = cmd.get("stdin") or ""
        stdin_path = None
        if stdin:
            stdin_path = PRIVATE_DIR + "/stdin"
            with open(stdin_path, "w", encoding="utf-8") as f:
                f.write(stdin)
        timeout_s = float(cmd.get("timeout_s") or self.cfg["timeout_s"])
        cap = int(self.cfg["output_bytes"])
        out, err = Output(cap), Output(cap)
        cpu0 = jail_cpu_s()
        t0 = time.monotonic()
        nonce = secrets.token_hex(8)
        try:
            if self.language == "python":
                write_frame(self.ctl, b"K", {"op": cmd["op"], "code": cmd["code"], "stdin_path": stdin_path})
                wait_fd = self.ctl
            else:
                cell = PRIVATE_DIR + "/cell"
                with open(cell, "w", encoding="utf-8") as f:
                    f.write(cmd["code"])
                group = "( . %s )" if test else "{ . %s; }"
                redirect = f" <{stdin_path or os.devnull} {CTL_FD}>&-; "
                line = (group % cell) + redirect + f"printf '{nonce} %d\\n' $? >&{CTL_FD}\n"
                _write_all(self.cmd_w, line.encode())
                wait_fd = self.status_r
            answer, cut = self._wait(wait_fd, out, err, t0, timeout_s, cpu0, nonce)
        except (OSError, ValueError):
            answer, cut = None, None
        duration = time.monotonic() - t0
        self._drain(out, err)
        cpu = max(0.0, jail_cpu_s() - cpu0)
        result: dict = {"value": None, "error": None, "exit_code": None, "timed_out": cut is not None}
        if answer is None:  # the kernel died (or was killed): its state is gone
            status = self._reap_kernel()
            self.restart()
            survived = False
            if cut is not None:
                result["error"] = _cut_error(cut, timeout_s, self.cfg, lost=True)
            else:
                result["error"] = {
                    "type": "KernelDied",
                    "message": f"the {self.language} kernel ended ({status}); its state is lost, files are kept",
                    "traceback": "",
                }
                if status.startswith("exit "):
                    result["exit_code"] = int(status[5:])
        elif self.language == "python":
            result["value"], result["error"] = answer.get("value"), answer.get("error")
            if cut is not None:
                result["error"] = _cut_error(cut, timeout_s, self.cfg, lost=False)
        else:
            result["exit_code"] = answer
            if cut is not None:
                result["error"] = _cut_error(cut, timeout_s, self.cfg, lost=False)
        self.cpu_total += cpu
        self.execs += 1
        result.update(
            stdout=out.text(),
            stderr=err.text(),
            stdout_truncated=out.dropped > 0,
            stderr_truncated=err.dropped > 0,
            duration_s=duration,
            cpu_s=cpu,
            cpu_total_s=self.cpu_total,
            state_survived=survived,
            restarts=self.restarts,
            ended=None,
        )
        total = self.cfg.get("total_cpu_s")
        if total is not None and self.cpu_total > float(total):
            result["ended"] = "cpu_total"
        return result

    def _wait(self, fd, out, err, t0, timeout_s, cpu0, nonce):
        """Read the outputs until the kernel answers on ``fd``: (answer, why it was cut or None).
        The answer is None when the kernel died or had to be killed."""
        exec_cpu = self.cfg.get("exec_cpu_s")
        grace = float(self.cfg["interrupt_grace_s"])
        deadline = t0 + timeout_s
        cut = None
        buf = b""
        poller = select.poll()
        for f in (self.out_r, self.err_r, fd):
            poller.register(f, select.POLLIN)
        while True:
            now = time.monotonic()
            if cut is None:
                over_cpu = exec_cpu is not None and jail_cpu_s() - cpu0 > float(exec_cpu)
                if now >= deadline or over_cpu:
                    cut = "cpu" if over_cpu and now < deadline else "wall"
                    kill_jail(signal.SIGINT)
                    deadline = now + grace
            elif now >= deadline:
                return None, cut  # did not stop when interrupted: the caller kills it
            wait = deadline - now
            if exec_cpu is not None and cut is None:
                wait = min(wait, TICK_S)
            for f, _ in poller.poll(max(1, int(wait * 1000))):
                if f == self.out_r:
                    self._read_into(f, out)
                elif f == self.err_r:
                    self._read_into(f, err)
                elif self.language == "python":
                    try:
                        return read_frame(fd, b"R"), cut
                    except (EOFError, ValueError):
                        return None, cut
                else:
                    chunk = os.read(fd, 256)
                    if not chunk:
                        return None, cut
                    buf += chunk
                    if b"\n" in buf:
                        fields = buf.split(b"\n", 1)[0].split(b" ")
                        if len(fields) != 2 or fields[0] != nonce.encode() or not fields[1].isdigit():
                            return None, cut  # something else wrote into the status pipe
                        return int(fields[1]), cut
                    if len(buf) > 256:
                        return None, cut

    def _read_into(self, fd, stream):
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if chunk:
            stream.add(chunk)

    def _drain(self, out, err):
        """What the exec wrote before it answered is in the pipes already."""
        for fd, stream in ((self.out_r, out), (self.err_r, err)):
            for _ in range(1024):
                try:
                    chunk = os.read(fd, CHUNK)
                except (BlockingIOError, OSError):
                    break
                if not chunk:
                    break
                stream.add(chunk)

    def _reap_kernel(self):
        """How the kernel ended ('exit N', 'signal N' or 'killed'), killing it if it still runs."""
        pid = self.pid
        if pid is None:
            return "killed"
        for _ in range(50):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return "killed"
            if got == pid:
                if os.WIFEXITED(status):
                    return f"exit {os.WEXITSTATUS(status)}"
                return f"signal {os.WTERMSIG(status)}"
            time.sleep(0.002)
        return "killed"

    def state(self):
        info = {
            "language": self.language,
            "restarts": self.restarts,
            "execs": self.execs,
            "cpu_total_s": self.cpu_total,
        }
        if self.pid is None:
            return info
        if self.language == "bash":
            try:
                info["cwd"] = os.readlink(f"/proc/{self.pid}/cwd")
            except OSError:
                info["cwd"] = None
            return info
        try:
            write_frame(self.ctl, b"K", {"op": "state"})
            ready, _, _ = select.select([self.ctl], [], [], 5.0)
            if ready:
                info["globals"] = read_frame(self.ctl, b"R").get("globals", [])
        except (OSError, ValueError, EOFError):
            pass
        return info


def _cut_error(cut, timeout_s, cfg, lost):
    what = f"{cfg.get('exec_cpu_s')} s of CPU time" if cut == "cpu" else f"timeout_s={timeout_s:g}"
    then = (
        "it did not stop when interrupted and was killed: the interpreter state is lost, files are kept"
        if lost
        else "it was interrupted; the session's state is kept"
    )
    return {"type": "TimeoutError", "message": f"the exec ran past {what}; {then}", "traceback": ""}


def _socketpair():
    import socket

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return a.detach(), b.detach()


def _set_dumpable(value):
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, value, 0, 0, 0)


def serve(argv):
    """The supervisor's loop (module docstring)."""
    if os.getpid() != 1:
        raise SystemExit("session: not the init of a PID namespace of its own; refusing to start")
    language, config = argv[0], json.loads(argv[1])
    if language not in ("python", "bash"):
        raise SystemExit(f"session: unknown language {language!r}")
    _set_dumpable(0)
    os.chdir(JAIL_WORKDIR)
    kernel = Kernel(language, config)
    kernel.start()
    _write_all(1, b"H " + PROTOCOL + b"\n")
    while True:
        try:
            cmd = read_frame(0, b"C")
        except (EOFError, ValueError, OSError):
            break
        op = cmd.get("op")
        if op in ("exec", "test"):
            answer = kernel.run(cmd)
        elif op == "state":
            answer = kernel.state()
        elif op == "close":
            break
        else:
            answer = {"error": f"unknown op {op!r}"}
        reap_all()
        write_frame(1, b"A", answer)
        if answer.get("ended"):
            break
    kernel.stop()
    os._exit(0)


if __name__ == "__main__":
    serve(sys.argv[1:])
elif __name__ == "__distrs_zygote_warm__":
    io.StringIO()  # the zygote runs this file once to import what it needs (warm for every fork)
