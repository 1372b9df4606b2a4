"""A fork server for the test cases of one python request, run inside that request's jail.

Standalone on purpose: the host passes this file's text to the jailed interpreter with ``-c``
(``python -I -B -c SOURCE SCRIPT [ARGS...]``), so nothing in the work dir, which the judged
program may rewrite, can change the server. It imports nothing of the program's. Per test case
it forks a child that becomes what ``python -I -B SCRIPT ARGS`` would be (``__name__ ==
"__main__"``, ``sys.argv``, fresh standard streams: stdin from the case's input, stdout and
stderr to pipes this server reads up to a cap, the case's rlimits set before the program runs)
and runs SCRIPT, then ends the child as the interpreter ends ``python SCRIPT``: uncaught
exceptions through ``sys.excepthook`` (a syntax error without a traceback header),
``SystemExit`` codes and messages, non-daemon threads joined, ``atexit`` run, streams flushed (a
failed flush exits 120), the main module's globals released so their finalizers run. It skips
the teardown of every other module: that is most of an interpreter's exit time, and in a forked
child it would touch (and so copy) every page the server shares with it.

The server is the init of the jail's PID namespace (``Session.start``). After each case it kills
every other process of the jail (``kill(-1, SIGKILL)`` from a namespace's init reaches every
process of the namespace but the caller) and reaps them (orphans, double-forked daemons
included, are reparented to it), until ``kill(-1, ...)`` finds nobody: nothing a case started
survives into the next one. It refuses to start unless it is pid 1, i.e. the init of a PID
namespace of its own, where nothing outside the jail can be reached by ``kill(-1)``.

The child can neither forge nor read the server's reports, nor stop the server: the control
pipes are closed in the child before the program runs; the server is non-dumpable
(``PR_SET_DUMPABLE`` 0: no process of the same uid can open ``/proc/1/fd/*``); as the namespace's
init it receives from inside the jail only signals it has a handler for, and it blocks every
catchable one (a SIGINT does not raise inside it). Should it die or stall anyway (killed at the
memory limit, say), the host's deadline kills the whole jail and only that request is affected.

Protocol over the control pipes (the server's stdin and stdout at start, moved off 0 and 1)::

    server -> host  b"H forkserver/1\\n"                                   once, when ready
    host -> server  b"R ID WALL_S CPU_S MEM_KIND MEM NPROC FSIZE NOFILE CAP STDIN_LEN\\n" + stdin
                    (MEM_KIND ``as`` or ``data``; -1 for an unlimited resource)
    server -> host  b"D ID TERM STATUS WALL_S CPU_S OUT_LEN ERR_LEN OUT_TRUNC ERR_TRUNC\\n"
                    + stdout + stderr    (TERM: exited, signaled, timeout, output_limit;
                                          STATUS: the raw wait status)
                    b"E ID message\\n"   the case could not be started (a sandbox failure)
"""

import contextlib
import ctypes
import fcntl
import gc
import io
import math
import os
import resource
import select
import signal
import sys
import time

PROTOCOL = b"forkserver/1"
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
CHUNK = 1 << 16
DRAIN_GRACE_S = 0.05
MAX_HEADER = 512
SETUP_MARKER = b"distrs-forkserver: "  # stderr of a child whose set-up failed starts with it
SETUP_FAILED = 127
SWEEP_S = 5.0


class Job:
    """What a forked child runs once it has left the server loop."""

    def __init__(self, script, args):
        self.script = script
        self.args = args


def _prctl(libc, option, value):
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Control:
    """Buffered reads from the host's pipe: one header line, then exact byte counts."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def _fill(self):
        chunk = os.read(self.fd, CHUNK)
        if not chunk:
            os._exit(0)  # the host closed the pipe: this request is over
        self.buf += chunk

    def line(self):
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_HEADER:
                raise ValueError("header too long")
            self._fill()
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data


def _limit(text):
    value = int(text)
    return None if value < 0 else value


def _stdin_fd(data):
    """A sealed memfd holding the case's input (seekable, like the per-run jail's stdin)."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    _write_all(fd, data)
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _std_stream(fd, template, mode, name):
    """A standard stream as the interpreter makes it at start-up (``create_stdio``)."""
    buf = io.open(fd, mode + "b", buffering=-1, closefd=False)  # noqa: SIM115, UP020 - outlives this call; io.open, as create_stdio
    raw = buf.raw
    raw.name = name
    stream = io.TextIOWrapper(
        buf,
        encoding=template.encoding,
        errors=template.errors,
        newline="\n",
        line_buffering=template.line_buffering,
        write_through=template.write_through,
    )
    stream.mode = mode  # type: ignore[misc]
    return stream


def _become_case(libc, server_pid, limits, stdin_fd, out_w, err_w, templates, script, args):
    """In the forked child: the process ``python -I -B SCRIPT ARGS`` would be, minus the code."""
    os.setsid()
    _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(137)
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, 1 << 20)  # the control pipes above all
    _wall, cpu, mem_kind, mem, nproc, fsize, nofile = limits
    cpu_s = max(1, math.ceil(cpu))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if mem is not None:
        kind = resource.RLIMIT_AS if mem_kind == "as" else resource.RLIMIT_DATA
        resource.setrlimit(kind, (mem, mem))
    for which, value in (
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NOFILE, nofile),
    ):
        if value is not None:
            resource.setrlimit(which, (value, value))
    _prctl(libc, PR_SET_DUMPABLE, 1)
    stdin_t, stdout_t, stderr_t = templates
    sys.stdin = sys.__stdin__ = _std_stream(0, stdin_t, "r", "<stdin>")  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _std_stream(1, stdout_t, "w", "<stdout>")  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _std_stream(2, stderr_t, "w", "<stderr>")  # type: ignore[misc]
    sys.argv = [script, *args]
    sys.orig_argv = [sys.executable, "-I", "-B", script, *args]
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    return Job(script, args)


def _sweep(first):
    """Kill every process of the jail but this one and its init; reap them. ``first``: the case's
    own child, already reaped. False if something is still alive after SWEEP_S."""
    deadline = time.monotonic() + SWEEP_S
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
            alive = True
        except ProcessLookupError:
            alive = False
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not alive:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _collect(pid, out_r, err_r, wall_s, cap):
    """Wait for the child under ``wall_s`` while reading its output up to ``cap`` per stream."""
    start = time.monotonic()
    deadline = start + wall_s
    bufs = {out_r: bytearray(), err_r: bytearray()}
    truncated = {out_r: False, err_r: False}
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    for fd in (out_r, err_r, pidfd):
        poller.register(fd, select.POLLIN)
    open_pipes = {out_r, err_r}
    term = None
    exited_at = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is not None and (not open_pipes or now - exited_at > DRAIN_GRACE_S):
                break
            if now >= deadline:
                term = "timeout"
                break
            timeout = deadline - now
            if exited_at is not None:
                timeout = min(timeout, exited_at + DRAIN_GRACE_S - now)
            for fd, _ in poller.poll(max(0, math.ceil(timeout * 1000))):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    exited_at = time.monotonic()
                    continue
                if fd not in open_pipes:
                    continue
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    poller.unregister(fd)
                    open_pipes.discard(fd)
                    continue
                buf = bufs[fd]
                room = cap - len(buf)
                if len(chunk) > room:
                    buf += chunk[:room]
                    truncated[fd] = True
                    term = "output_limit"
                    break
                buf += chunk
            if term is not None:
                break
    finally:
        os.close(pidfd)
    if term is not None:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    if term is None:
        term = "signaled" if os.WIFSIGNALED(status) else "exited"
    return term, status, wall, usage.ru_utime + usage.ru_stime, bufs, truncated


def serve():
    """The server loop; returns only in a forked child, with the job it is to run."""
    server_pid = os.getpid()
    if server_pid != 1:
        raise SystemExit("fork server: not the init of a PID namespace of its own; refusing to start")
    script, args = sys.argv[1], sys.argv[2:]
    ctl_in, ctl_out = os.dup(0), os.dup(1)  # close-on-exec; fds 0 and 1 become /dev/null
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, PR_SET_DUMPABLE, 0)
    _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    templates = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
    control = Control(ctl_in)
    gc.freeze()  # what is here now stays out of the children's collections (no copy-on-write)
    _write_all(ctl_out, b"H " + PROTOCOL + b"\n")
    while True:
        fields = control.line().split()
        if len(fields) != 11 or fields[0] != b"R":
            raise SystemExit("fork server: malformed request")
        rid = fields[1].decode()
        wall, cpu = float(fields[2]), float(fields[3])
        mem_kind = fields[4].decode()
        mem, nproc, fsize, nofile = (_limit(f) for f in fields[5:9])
        cap, stdin_len = int(fields[9]), int(fields[10])
        data = control.exact(stdin_len)
        try:
            stdin_fd = _stdin_fd(data)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            pid = os.fork()
        except OSError as e:
            _write_all(ctl_out, f"E {rid} cannot start the case: {e}".encode().replace(b"\n", b" ") + b"\n")
            _sweep(None)
            continue
        if pid == 0:
            limits = (wall, cpu, mem_kind, mem, nproc, fsize, nofile)
            try:
                return _become_case(libc, server_pid, limits, stdin_fd, out_w, err_w, templates, script, args)
            except BaseException as e:  # a sandbox failure, never the program's
                os.write(2, f"{SETUP_MARKER.decode()}{type(e).__name__}: {e}\n".encode())
                os._exit(SETUP_FAILED)
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        try:
            term, status, took, cpu_used, bufs, truncated = _collect(pid, out_r, err_r, wall, cap)
        finally:
            os.close(out_r)
            os.close(err_r)
        if not _sweep(pid):
            _write_all(ctl_out, f"E {rid} processes of the case did not end".encode() + b"\n")
            raise SystemExit(1)
        out, err = bytes(bufs[out_r]), bytes(bufs[err_r])
        head = (
            f"D {rid} {term} {status} {took:.6f} {cpu_used:.6f} {len(out)} {len(err)} "
            f"{int(truncated[out_r])} {int(truncated[err_r])}\n"
        )
        _write_all(ctl_out, head.encode() + out + err)


def _system_exit_code(e):
    """The exit status ``python SCRIPT`` has for an uncaught SystemExit (``_Py_HandleSystemExit``)."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):  # ignored, as the interpreter ignores it
        sys.stderr.write(str(code) + "\n")
    return 1


class _Unraisable:
    """What ``sys.unraisablehook`` is given (its own type cannot be built from Python)."""

    def __init__(self, e, obj):
        self.exc_type, self.exc_value, self.exc_traceback = type(e), e, None
        self.err_msg, self.object = None, obj


def _unraisable(e, obj):
    """``PyErr_WriteUnraisable``: the default hook's text, or the program's own hook."""
    if sys.unraisablehook is not sys.__unraisablehook__:
        sys.unraisablehook(_Unraisable(e, obj))
        return
    kind = type(e)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    text = str(e)
    try:
        sys.stderr.write(
            f"Exception ignored in: {obj!r}\n{name}: {text}\n"
            if text
            else f"Exception ignored in: {obj!r}\n{name}\n"
        )
        sys.stderr.flush()
    except BaseException:
        pass


def _flush_std_files():
    """``flush_std_files`` of the interpreter: False when stdout or stderr could not be flushed."""
    ok = True
    out = sys.stdout
    if out is not None and not getattr(out, "closed", True):
        try:
            out.flush()
        except BaseException as e:
            _unraisable(e, out)
            ok = False
    err = sys.stderr
    if err is not None and not getattr(err, "closed", True):
        try:
            err.flush()
        except BaseException:
            ok = False
    return ok


def _finish(main, status):
    """End the child as ``Py_FinalizeEx`` ends ``python SCRIPT``, minus the teardown of every
    module (most of an interpreter's exit time, and copy-on-write faults in a forked one): threads
    joined, ``atexit`` run, streams flushed (a failure exits 120), the main module's globals
    released (underscored names first, as ``_PyModule_ClearDict`` does) so their finalizers run,
    streams flushed again."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException as e:
            _unraisable(e, threading)
    import atexit

    atexit._run_exitfuncs()
    ok = _flush_std_files()
    d = main.__dict__
    for underscored in (True, False):
        for name in list(d):
            if name != "__builtins__" and name.startswith("_") == underscored:
                d[name] = None
    gc.collect()
    ok = ok and _flush_std_files()  # (the interpreter reports a failed flush once)
    os._exit(status if ok else 120)


def run(job):
    """Run the job's script as ``__main__`` in the forked child and end the child as the
    interpreter ends ``python SCRIPT``."""
    import builtins
    import importlib.machinery

    path = os.path.abspath(job.script)
    main = type(sys)("__main__")
    main.__dict__.update(
        __builtins__=builtins,
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __spec__=None,
        __package__=None,
        __annotations__={},
    )
    sys.modules["__main__"] = main
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:  # reported as the interpreter does: no traceback header
        sys.excepthook(type(e), e.with_traceback(None), None)
        _finish(main, 1)
    except OSError as e:
        sys.stderr.write(
            f"{sys.executable}: can't open file {job.script!r}: [Errno {e.errno}] {e.strerror}\n"
        )
        _finish(main, 2)
    try:
        exec(code, main.__dict__)
    except SystemExit as e:
        _finish(main, _system_exit_code(e))
    except BaseException as e:  # the interpreter's report, without this frame
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):  # the interpreter ends with SIGINT after its exit
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _flush_std_files()
            os.kill(os.getpid(), signal.SIGINT)
        _finish(main, 1)
    _finish(main, 0)


if __name__ == "__main__":
    run(serve())
