"""The python kernel of a stateful session, and the framing its supervisor speaks.

Runs inside the session's jail, in the kernel process its supervisor forks (``session_child.py``,
whose text follows this file's in the program the jail runs: ``stateful.child_source``); it
imports nothing of distrs, which is not in the jail. One ``__main__`` namespace lives across
cells, REPL style: the trailing expression statement of a cell is evaluated and its ``repr``
returned as ``value`` (nothing for None, nor for a cell whose last line ends with ``;``, as Jupyter
shows it), ``_`` holds the last value, top-level ``await`` runs on a loop of the kernel's own, and
an exception comes back as its type, message and a traceback of the cell's own frames. SIGINT
interrupts a cell (``KeyboardInterrupt`` inside it) and never the kernel's own loop. A ``test``
runs in a fork of the kernel: a copy of the state, whose changes are not kept.

Framing (kernel and supervisor alike): ``TAG LENGTH\n`` + JSON.
"""

import ast
import builtins
import contextlib
import json
import linecache
import os
import signal
import sys
import traceback
import types

PROTOCOL = b"session/1"
JAIL_WORKDIR = "/jail/work"
CHUNK = 1 << 16
MAX_FRAME = 64 << 20
CELL_PREFIX = "<cell-"
CTL_FD = 3


# -- framing ---------------------------------------------------------------------------------


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(CHUNK, n - len(buf)))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _read_line(fd, limit=64):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError
        buf += chunk
        if len(buf) > limit:
            raise ValueError("overlong header")
    return buf[:-1]


def read_frame(fd, tag):
    head = _read_line(fd).split(b" ")
    if len(head) != 2 or head[0] != tag or not head[1].isdigit() or int(head[1]) > MAX_FRAME:
        raise ValueError("malformed frame")
    return json.loads(_read_exact(fd, int(head[1])))


def write_frame(fd, tag, obj):
    data = json.dumps(obj).encode()
    _write_all(fd, tag + b" %d\n" % len(data) + data)


# -- the python kernel (runs in the kernel process) -------------------------------------------


class Cell:
    """Whether a cell is running: SIGINT interrupts a cell only, never the kernel's own loop."""

    running = False


def _on_interrupt(_sig, _frame):
    if Cell.running:
        raise KeyboardInterrupt


def _format_error(exc, filename):
    """(type, message, traceback text) of ``exc``, the traceback from the cell's frames on."""
    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc))
        return type(exc).__name__, str(exc), text
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(CELL_PREFIX):
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    return type(exc).__name__, str(exc), "".join(lines)


def run_cell(code, namespace, counter):
    """Run ``code`` in ``namespace`` as a REPL cell: (value, error)."""
    filename = f"{CELL_PREFIX}{counter}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    value = None
    try:
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
        _run_code(body, namespace)
        if last is not None:
            result = _run_code(compile(last, filename, "eval", flags=flags, dont_inherit=True), namespace)
            if result is not None:
                namespace["_"] = result
                value = repr(result)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the cell's outcome
        kind, message, text = _format_error(exc, filename)
        return None, {"type": kind, "message": message, "traceback": text}
    return value, None


def _run_code(code, namespace):
    result = eval(code, namespace)
    if code.co_flags & 0x80:  # CO_COROUTINE: a cell with a top-level await
        import asyncio

        loop = namespace.get("__distrs_loop__")
        if loop is None:
            loop = asyncio.new_event_loop()
            namespace["__distrs_loop__"] = loop
        result = loop.run_until_complete(result)
    return result


def _cell_streams(stdin_path):
    """Fresh standard streams for a cell: stdin from its input, stdout/stderr to our pipes."""
    fd = os.open(stdin_path or os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _flush():
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a cell that closed or replaced its streams
            stream.flush()


def _globals_view(namespace):
    out = []
    for name, value in namespace.items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        out.append({"name": name, "type": type(value).__name__})
    return out[:500]


def python_kernel():
    """The kernel's loop: one cell per command on CTL_FD, its outcome back on it."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = [""]
    sys.path.insert(0, "")
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGINT, _on_interrupt)
    counter = 0
    while True:
        try:
            cmd = read_frame(CTL_FD, b"K")
        except EOFError:
            os._exit(0)
        if cmd.get("op") == "state":
            write_frame(CTL_FD, b"R", {"globals": _globals_view(main.__dict__)})
            continue
        counter += 1
        _cell_streams(cmd.get("stdin_path"))
        if cmd.get("op") == "test":
            answer = _test_in_fork(cmd["code"], main.__dict__, counter)
        else:
            Cell.running = True
            try:
                value, error = run_cell(cmd["code"], main.__dict__, counter)
            finally:
                Cell.running = False
            _flush()
            answer = {"value": value, "error": error}
        write_frame(CTL_FD, b"R", answer)


def _test_in_fork(code, namespace, counter):
    """Run ``code`` in a copy of the session's state (a fork): the session is left as it was."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        Cell.running = True
        value, error = run_cell(code, namespace, counter)
        Cell.running = False
        _flush()
        _write_all(w, json.dumps({"value": value, "error": error}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        try:
            chunk = os.read(r, CHUNK)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        why = f"the test's process ended with status {status} before it reported"
        return {"value": None, "error": {"type": "TestCrashed", "message": why, "traceback": ""}}
