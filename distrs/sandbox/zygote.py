"""The host side of a zygote: a request's fork server forked from a warm, jailed interpreter.

Per request, the fork server path costs one bubblewrap jail, its helpers (``sh`` for the cgroup,
``setpriv``, ``prlimit``) and a fresh interpreter with its ``site`` and imports: tens of
milliseconds of CPU before the first case, several times what the cases themselves cost. A
zygote pays those once per worker: it is started in a jail of its own (bubblewrap, the same
read-only view as a run's jail, PID/mount/network/IPC/UTS namespaces) and forks each request
into fresh namespaces of its own, where the request's server drops to the run's uid, rlimits and
seccomp filter before anything of the request runs (``zygote_child.py`` says how and why that
is the same jail). Here, per request: the session's work dir and ``/tmp`` are cloned as detached
mounts (``open_tree``) and handed over with the request's socket; the server's pid comes back in
the kernel's credentials of its hello (as this host's PID namespace numbers it), is pinned with
a pidfd and moved into the run's cgroup before the server may go on.

Where the worker can switch uids (``pool`` in ``privileges.py``) or is root of a user namespace
of its own (``private``: the chart's default non-root pods) and each session has its own tmpfs.
A private zygote gives each request a user namespace of its own, whose maps this side writes
(:func:`map_user_namespace`: the jail uid onto the worker's, as bubblewrap's jail per request
has it) when the request's server first reports. Elsewhere (``plain`` workers, root of a
user-namespaced pod, the ``rlimits`` jail, see :meth:`LocalSandbox.zygote`) each request starts
its server in a jail as before. ``DISTRS_JUDGE_PYTHON_ZYGOTE=false`` turns it off.

What the host trusts: the zygote is ours and never runs a request's code, but a request's
server speaks through its socket after it has dropped privileges, so everything after the hello
goes through the fork server's strict parsing (``forkserver.py``). A zygote that does not answer
is killed (with every request jail nested in it) and started afresh on the next request.
"""

from __future__ import annotations

import array
import ctypes
import math
import os
import select
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path

from distrs.sandbox.base import Limits, SandboxError
from distrs.sandbox.cgroups import RunCgroup
from distrs.sandbox.jail import JAIL_UID

PROTOCOL = b"zygote/1"
CHILD_SOURCE = Path(__file__).with_name("zygote_child.py")
START_TIMEOUT_S = 30.0
HELLO_TIMEOUT_S = 10.0
LOST_WAIT_S = 0.3  # for a dying zygote to be reaped, once one of its requests' servers died
_AT_FDCWD = -100
_SYS_OPEN_TREE = 428  # the same number on every architecture
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = 0o2000000
_CRED = array.array("i", [0, 0, 0]).itemsize * 3


def initial_user_namespace(uid_map: str | None = None) -> bool:
    """Whether this process runs in the host's initial user namespace (``/proc/self/uid_map``
    maps all of 0..2^32-2 onto itself). A root worker in a user-namespaced pod is not: its
    kernel refuses a request's server a fresh ``/proc`` under the pod's masked one, so such a
    worker keeps a jail per request. Unreadable counts as not."""
    if uid_map is None:
        try:
            uid_map = Path("/proc/self/uid_map").read_text()
        except OSError:
            return False
    return uid_map.split() == ["0", "0", "4294967295"]


PRIVATE_MACHINES = ("x86_64", "aarch64")  # those whose pivot_root number zygote_child.py knows


def private_proc_covered(proc: Path = Path("/proc")) -> bool:
    """Whether a zygote's jail would cover parts of its fresh /proc (``sys``, ``sysrq-trigger``,
    ``irq``, ``bus``: bubblewrap binds those it can write to read-only). In a private request's
    mount namespace those covers are locked over non-empty directories, so the kernel no longer
    counts the zygote's /proc as fully visible and refuses the request a fresh one (EPERM).
    Only a worker that is root of a user namespace mapping a root-owned /proc can write there,
    i.e. a real root that mapped only itself; a non-root worker's jail has no covers."""
    return any(os.access(proc / name, os.W_OK) for name in ("sys", "sysrq-trigger", "irq", "bus"))


def child_source() -> str:
    return CHILD_SOURCE.read_text()


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def detached_clone(path: Path) -> int:
    """A detached bind mount of ``path`` (``open_tree(OPEN_TREE_CLONE)``), as an fd that another
    mount namespace can ``move_mount`` into place."""
    libc = _libc()
    fd = int(
        libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, str(path).encode(), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {path}: {os.strerror(err)}")
    return fd


def request_line(uid: int, proc: bool, limits: Limits, args: Sequence[str]) -> bytes:
    """The zygote's request header for a server with ``limits`` (see ``zygote_child.py``)."""

    def n(v: int | None) -> str:
        return "-1" if v is None else str(int(v))

    cpu = max(1, math.ceil(limits.effective_cpu_s))
    hex_args = ",".join(a.encode().hex() for a in args) or "-"
    return (
        f"Q {uid} {int(proc)} {cpu} {limits.memory_kind.value} {n(limits.memory_bytes)} "
        f"{n(limits.nproc)} {n(limits.fsize_bytes)} {n(limits.nofile)} {hex_args}\n"
    ).encode()


class ZygoteJail:
    """One request's fork server, forked from a zygote (a ``forkserver.ServerJail``)."""

    def __init__(
        self,
        sock: socket.socket,
        pid: int,
        pidfd: int,
        cgroup: RunCgroup | None,
        zygote: subprocess.Popen[bytes] | None = None,
        *,
        own_cgroup: bool = False,
    ) -> None:
        self._sock = sock
        self._zygote = zygote
        self.pid = pid
        self._pidfd = pidfd
        self._cgroup = cgroup
        self._own_cgroup = own_cgroup  # a one-off cgroup (no pool uid): removed with the server
        self._killed = False

    @property
    def in_fd(self) -> int:
        return self._sock.fileno()

    @property
    def out_fd(self) -> int:
        return self._sock.fileno()

    def oom_kills(self) -> int:
        return self._cgroup.oom_kills() if self._cgroup is not None else 0

    def lost(self) -> bool:
        """Whether the zygote this server was forked from is gone (its death kills every
        request's jail nested in it; it takes a moment to finish dying)."""
        if self._zygote is None:
            return False
        try:
            self._zygote.wait(LOST_WAIT_S)
            return True
        except subprocess.TimeoutExpired:
            return False

    def end_input(self) -> None:
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    def wait(self, timeout_s: float) -> bool:
        if self._killed:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(max(0, math.ceil(timeout_s * 1000))))

    def kill(self) -> None:
        """Kill the server, the init of the request's PID namespace: the kernel then kills every
        process of the request (the zygote reaps the server)."""
        if self._killed:
            return
        self._killed = True
        with suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        self._sock.close()
        os.close(self._pidfd)
        if self._own_cgroup and self._cgroup is not None:
            self._cgroup.remove()


class Zygote:
    """A jailed zygote for one program (``start`` builds its bubblewrap command and starts it)."""

    def __init__(
        self,
        start: Callable[[int], subprocess.Popen[bytes]],
        program: str,
        *,
        proc: bool,
        private: bool = False,
    ) -> None:
        self._start = start
        self._program = program.encode()
        self._proc_mount = proc
        self.private = private  # each request in a user namespace of its own (``zygote_child.py``)
        self._lock = threading.Lock()
        self._popen: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self.started = 0

    def _ensure(self) -> socket.socket:
        if self._ctl is not None and self._popen is not None and self._popen.poll() is None:
            return self._ctl
        self._stop()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._popen = self._start_kept(child.fileno())
        finally:
            child.close()
        self._ctl = host
        self.started += 1
        host.settimeout(START_TIMEOUT_S)
        try:
            host.sendall(b"P %d\n" % len(self._program) + self._program)
            hello = host.recv(64)
        except OSError as e:
            self._stop()
            raise SandboxError(f"zygote did not start: {e}") from None
        if hello != b"Z " + PROTOCOL + b"\n":
            self._stop()
            raise SandboxError(f"zygote said {hello[:100]!r} instead of hello")
        host.settimeout(HELLO_TIMEOUT_S)
        return host

    def _start_kept(self, ctl: int) -> subprocess.Popen[bytes]:
        """Start the zygote from a thread of its own that lives as long as it does: bubblewrap's
        ``--die-with-parent`` fires when the *thread* that started it ends, and a worker's
        threads come and go."""
        got: list[subprocess.Popen[bytes] | BaseException] = []
        ready = threading.Event()

        def keep() -> None:
            try:
                got.append(self._start(ctl))
            except BaseException as e:
                got.append(e)
                return
            finally:
                ready.set()
            popen = got[0]
            assert isinstance(popen, subprocess.Popen)
            popen.wait()

        threading.Thread(target=keep, name="distrs-zygote", daemon=True).start()
        ready.wait()
        if isinstance(got[0], BaseException):
            raise got[0]
        return got[0]

    def _stop(self) -> None:
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
        if self._popen is not None:
            if self._popen.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()
            self._popen = None

    def close(self) -> None:
        """Stop the zygote (and with it every request jail still running in it)."""
        with self._lock:
            self._stop()

    def spawn(
        self,
        *,
        workdir: Path,
        tmpdir: Path,
        uid: int,
        limits: Limits,
        args: Sequence[str],
        cgroup: RunCgroup | None,
        own_cgroup: bool = False,
    ) -> ZygoteJail:
        """A request's fork server in fresh namespaces, with ``limits`` as its own rlimits, in
        ``cgroup`` (already set up for the run; removed with the server where ``own_cgroup``)
        and as ``uid`` (a private zygote's: inside the request's user namespace); SandboxError
        if it cannot be."""
        line = request_line(uid, self._proc_mount, limits, args)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            fds = [theirs.fileno()]
            try:
                fds += [detached_clone(workdir), detached_clone(tmpdir)]
                zygote = self._send(line, fds)
            except OSError as e:
                raise SandboxError(f"cannot hand the request to the zygote: {e}") from e
            finally:
                for fd in fds[1:]:
                    os.close(fd)
                theirs.close()
            return self._accept(mine, cgroup, zygote, own_cgroup)
        except BaseException:
            mine.close()
            raise

    def _send(self, line: bytes, fds: list[int]) -> subprocess.Popen[bytes]:
        """Hand the request to a live zygote (a fresh one if needed); the zygote's process."""
        with self._lock:
            for attempt in (1, 2):
                ctl = self._ensure()
                try:
                    if socket.send_fds(ctl, [line], fds) != len(line):
                        raise OSError("short write to the zygote")
                    assert self._popen is not None
                    return self._popen
                except OSError:
                    self._stop()  # dead or stuck: a fresh one, once
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

    def _accept(
        self,
        sock: socket.socket,
        cgroup: RunCgroup | None,
        zygote: subprocess.Popen[bytes],
        own_cgroup: bool,
    ) -> ZygoteJail:
        sock.settimeout(HELLO_TIMEOUT_S)
        try:
            msg, anc, _, _ = sock.recvmsg(512, socket.CMSG_SPACE(_CRED))
        except OSError as e:
            self.close()  # a zygote that does not fork within seconds is not to be trusted further
            raise SandboxError(f"no request jail from the zygote: {e}") from None
        pid = 0
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CRED:
                pid = array.array("i", data[:_CRED])[0]
        if msg != (b"U\n" if self.private else b"B\n") or pid <= 1:
            raise SandboxError(f"the zygote could not build the request's jail: {_said(msg)}")
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:
            raise SandboxError(f"the request's server is gone: {e}") from None
        jail = ZygoteJail(sock, pid, pidfd, cgroup, zygote, own_cgroup=own_cgroup)
        try:
            if self.private:
                map_user_namespace(pid)
            if cgroup is not None:
                cgroup.join(pid)
            sock.sendall(b"G\n")
            if self.private:  # its jail is built after its maps: a failure is still reported
                msg = _line(sock)  # exactly: the server's own hello may follow at once
                if msg != b"B\n":
                    raise SandboxError(f"the zygote could not build the request's jail: {_said(msg)}")
        except OSError as e:
            jail.kill()
            raise SandboxError(f"cannot start the request's server: {e}") from None
        except SandboxError:
            jail.kill()
            raise
        sock.settimeout(None)
        return jail


def _line(sock: socket.socket, limit: int = 512) -> bytes:
    """One line from ``sock`` and not a byte more (shorter at EOF or ``limit``)."""
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        buf += chunk
    return buf


def _said(msg: bytes) -> str:
    return msg[2:].decode(errors="replace").strip() if msg.startswith(b"E ") else repr(msg[:100])


def id_maps(uid: int, gid: int) -> dict[str, str]:
    """What a private request's user namespace is given, in the order it is written: as in
    bubblewrap's jail, the jail uid and gid onto this process's own, no ``setgroups``."""
    return {"setgroups": "deny", "uid_map": f"{JAIL_UID} {uid} 1\n", "gid_map": f"{JAIL_UID} {gid} 1\n"}


def map_user_namespace(pid: int) -> None:
    """Write the maps of the (still unmapped) user namespace of process ``pid``, from this
    process's own, its parent (OSError if the kernel refuses)."""
    for name, text in id_maps(os.geteuid(), os.getegid()).items():
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
