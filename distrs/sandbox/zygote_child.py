"""The jailed side of a zygote: a warm interpreter that forks each request into a jail of its own.

Starting a request's jail (bubblewrap, its helpers, a fresh interpreter and its imports) costs
tens of milliseconds of CPU, most of it the interpreter's start-up. A zygote is started once per
worker in a jail of its own (``distrs/sandbox/zygote.py`` on the host: bubblewrap with the same
read-only view as a run's jail, but still root of it and without the seccomp filter, so that it
can build further namespaces). It runs no request's code itself: for each request it forks a
child that unshares fresh mount, PID, network, IPC and UTS namespaces and forks again; that
grandchild (the request's "server") is the init of its own PID namespace and

1. makes its mounts private, moves the request's work dir and ``/tmp`` (detached clones of the
   session's tmpfs, made by the host with ``open_tree``) onto ``/jail/work`` and ``/tmp``, and
   mounts a fresh ``/proc`` (with ``sys``, ``sysrq-trigger``, ``irq`` and ``bus`` read-only, as
   bubblewrap does) where runs get one, and a fresh ``devpts``;
2. says hello to the host on the request's own socket; the kernel attaches its pid as the host
   sees it (``SCM_CREDENTIALS``), and the host moves it into the run's cgroup and answers ``G``;
3. unshares a cgroup namespace, applies the server's rlimits, drops every capability (bounding,
   inheritable and ambient sets), becomes the run's pool uid (groups cleared), sets
   ``no_new_privs`` and loads the jail's seccomp filter (``seccomp.py``): from here on it is
   what ``setpriv ... prlimit ... PROGRAM`` in a bubblewrap jail would be;
4. keeps only the request's socket (as fds 0 and 1; fd 2 is ``/dev/null``), changes to the work
   dir, and runs the program it was started for (the reward type's fork server, whose source the
   zygote compiled and warmed once) as ``__main__`` of ``python -I -B -c PROGRAM ARGS``.

A ``private`` zygote (a non-root worker, root of a user namespace with one mapped uid) differs
in three steps, so that the request gets what bubblewrap's ``--unshare-user`` jail gives it
there: its fork clones the zygote's root tree and unshares a user namespace before the others
(they then belong to it); the server first says ``U`` (the host writes its uid and gid maps and
moves it into the cgroup, then answers ``G``), puts its jail together on that clone and pivots
into it (``_build_private_root`` says why), then says ``B``; and it stays the jail uid (65534)
with the worker's groups, every capability cleared.

Nothing of one request reaches the next: every request has fresh namespaces and its own tmpfs,
its processes die with its PID namespace, and the zygote's memory is only ever copied from. The
request's processes cannot reach the zygote: it is outside their PID namespace, runs as root
(of the worker's user namespace, when private) while they run without capabilities as a pool uid
(or the jail uid of a user namespace of their own), and is never given anything but a request
line and three fds.

Started as ``python -I -B -c SOURCE SECCOMP_FD MODE [TMP_BIND ...]`` (the compiled filter on that
fd; MODE ``pool`` or ``private``; read-only binds below /tmp, see ``TMP_BINDS``). Protocol on
fd 0 (a unix stream socket from the host; everything here trusts only the host)::

    host -> zygote  b"P LENGTH\\n" + the program's source
    zygote -> host  b"Z zygote/1\\n"                               ready
    host -> zygote  b"Q UID PROC CPU MEMKIND MEM NPROC FSIZE NOFILE ARGS\\n"  with 3 fds
                    (SCM_RIGHTS: the request's socket, its work dir and its /tmp mount);
                    PROC 0|1, limits as integers (-1: none), ARGS hex-encoded, comma-separated
  pool:
    server -> host  b"B\\n" (host reads its pid from the credentials) or b"E message\\n"
    host -> server  b"G\\n"                                       joined its cgroup: go on
  private:
    server -> host  b"U\\n" (pid from the credentials) or b"E message\\n"
    host -> server  b"G\\n"                      its user namespace mapped, joined its cgroup
    server -> host  b"B\\n" or b"E message\\n"                  its jail is built

The host closing fd 0 ends the zygote; the zygote dying ends every request's jail (it is the init
of the PID namespace they are nested in).
"""

import builtins
import ctypes
import fcntl
import gc
import os
import resource
import signal
import socket
import struct
import sys

PROTOCOL = b"zygote/1"
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1
AT_FDCWD = -100
SYS_MOVE_MOUNT = 429  # the same number on every architecture (the unified table from 5.1 on)
SYS_OPEN_TREE = 428
# not unified: those of the machines a private zygote serves (``zygote.PRIVATE_MACHINES``)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = 0o2000000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")  # read-only in a fresh /proc, as bubblewrap does
SETUP_FAILED = 127
EINVAL = 22  # past the kernel's last capability
JAIL_WORKDIR = "/jail/work"
# an empty directory of the zygote's root, where a private request's root is put together
NEW_ROOT = JAIL_WORKDIR


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))


class CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


class Job:
    """What a request's server runs once its jail is built."""

    def __init__(self, code, args):
        self.code = code
        self.args = args


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return libc


def _check(result, what):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _encoded(text):
    return None if text is None else text.encode()


def _mount(libc, source, target, fstype, flags, data=None):
    args = (_encoded(source), _encoded(target), _encoded(fstype), flags, _encoded(data))
    _check(libc.mount(*args), f"mount {target}")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_line(fd):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            os._exit(0)  # the host gave up on this request
        buf += chunk
        if len(buf) > 64:
            raise ValueError("overlong line from the host")
    return buf[:-1]


# Read-only binds of the zygote's jail that lie under /tmp (an interpreter's prefix in a checkout
# under /tmp, say), from argv: the request's /tmp would hide them, so each is cloned before and put
# back on top of it, as bubblewrap binds them after its /tmp.
TMP_BINDS: list[str] = []


def _move(libc, fd, target):
    _check(
        libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        f"move_mount {target}",
    )
    os.close(fd)


def _build_mounts(libc, work_fd, tmp_fd, proc):
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    kept = [(_open_tree(libc, p), p) for p in TMP_BINDS]
    for _, path in reversed(kept):  # the zygote's own: they would stay listed under the new /tmp
        _check(libc.umount2(path.encode(), MNT_DETACH), f"umount {path}")
    _move(libc, tmp_fd, "/tmp")
    for fd, path in kept:  # made by root in the request's fresh /tmp: not the request's to change
        os.makedirs(path, 0o755, exist_ok=True)
        _move(libc, fd, path)
    _move(libc, work_fd, JAIL_WORKDIR)
    if proc:  # the zygote's own /proc (its PID namespace's) goes; a fresh one for this namespace
        _check(libc.umount2(b"/proc", MNT_DETACH), "umount /proc")
        _fresh_proc(libc, "/proc")
    _fresh_devpts(libc, "/dev/pts")


def _open_tree(libc, path):
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    return _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), flags), f"open_tree {path}")


def _fresh_proc(libc, proc):
    """A fresh ``/proc`` for this PID namespace with those of ``PROC_COVERED`` that this process
    could write to read-only, as bubblewrap does (``proc`` is where it goes)."""
    _mount(libc, "proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERED:
        path = f"{proc}/{name}"
        if os.access(path, os.W_OK):
            _mount(libc, path, path, None, MS_BIND | MS_REC)
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
            _mount(libc, None, path, None, flags)


def _fresh_devpts(libc, pts):
    """A devpts instance of its own at ``pts`` (where the zygote has one): no pty of another request."""
    if os.path.ismount(pts):
        _check(libc.umount2(pts.encode(), MNT_DETACH), f"umount {pts}")
        flags = MS_NOSUID | MS_NOEXEC
        _mount(libc, "devpts", pts, "devpts", flags, "newinstance,ptmxmode=0666,mode=620")


def _build_private_root(libc, root_fd, work_fd, tmp_fd, proc):
    """A private request's mounts (see ``_request``): its mount namespace belongs to its own user
    namespace, so every mount copied into it from the zygote's is locked (the kernel lets no
    unprivileged namespace reveal what lies under one). The zygote's root tree, cloned by the
    zygote's fork while still in the zygote's user namespace (``root_fd``), is not: it is put
    together on ``NEW_ROOT`` (the request's /tmp and work dir moved in, the zygote's /proc and
    devpts replaced by fresh ones), becomes the root (``pivot_root``), and the old root, locked
    mounts and all, is detached as one tree."""
    if SYS_PIVOT_ROOT is None:
        raise OSError(38, f"pivot_root: no system call number known for {os.uname().machine}")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _move(libc, root_fd, NEW_ROOT)
    kept = [(_open_tree(libc, NEW_ROOT + p), p) for p in TMP_BINDS]
    for _, path in reversed(kept):  # the zygote's own: they would stay listed under the new /tmp
        _check(libc.umount2((NEW_ROOT + path).encode(), MNT_DETACH), f"umount {path}")
    _move(libc, tmp_fd, NEW_ROOT + "/tmp")
    for fd, path in kept:  # made in the request's fresh /tmp: not the request's to change
        os.makedirs(NEW_ROOT + path, 0o755, exist_ok=True)
        _move(libc, fd, NEW_ROOT + path)
    _move(libc, work_fd, NEW_ROOT + JAIL_WORKDIR)
    if os.path.ismount(NEW_ROOT + "/proc"):  # the zygote's (its PID namespace's)
        _check(libc.umount2((NEW_ROOT + "/proc").encode(), MNT_DETACH), "umount /proc")
    if proc:  # allowed while the old root's /proc is still there to show procfs is not hidden
        _fresh_proc(libc, NEW_ROOT + "/proc")
    _fresh_devpts(libc, NEW_ROOT + "/dev/pts")
    os.chdir(NEW_ROOT)
    _check(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def _loopback_up():
    """The new network namespace's ``lo`` up, as bubblewrap brings it up (the kernel gives it
    127.0.0.1 and ::1): localhost is the jail's own."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))


def _drop_privileges(libc, uid, limits, bpf, private):
    cpu, mem_kind, mem, nproc, fsize, nofile = limits
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if mem >= 0:
        resource.setrlimit(resource.RLIMIT_AS if mem_kind == "as" else resource.RLIMIT_DATA, (mem, mem))
    for which, value in (
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, fsize),
        (resource.RLIMIT_NOFILE, nofile),
    ):
        if value >= 0:
            resource.setrlimit(which, (value, value))
    for cap in range(64):  # the bounding set: what no exec can ever regain
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != EINVAL:
            raise OSError(ctypes.get_errno(), f"cannot drop capability {cap} from the bounding set")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    if not private:  # a private request's groups are the worker's, mapped as in bubblewrap's jail,
        os.setgroups([])  # and its user namespace refuses setgroups (denied before its maps)
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # pool: clears the permitted and effective sets (no keep-caps)
    header, data = CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (CapData * 2)()
    # every set cleared: the inheritable one, and (private) all that a new user namespace gave
    _check(libc.capset(ctypes.byref(header), data), "clear capabilities")
    _check(libc.capget(ctypes.byref(header), data), "capget")
    if any(d.effective or d.permitted or d.inheritable for d in data) or os.getresuid() != (uid, uid, uid):
        raise OSError(1, "privileges were not dropped")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    prog = SockFprog(len(bpf) // 8, bpf)
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp filter")


def _become_server(libc, chan, work_fd, tmp_fd, fields, code, bpf, root_fd):
    """In the request's server (init of its PID namespace): build its jail, then the job.
    ``root_fd``: the zygote's root tree for a private request (``_request``), else None."""
    uid, proc = int(fields[1]), fields[2] == b"1"
    if uid <= 0:
        raise ValueError("a request never runs as root")
    cpu = int(fields[3])
    mem_kind = fields[4].decode()
    mem, nproc, fsize, nofile = (int(f) for f in fields[5:9])
    args = [bytes.fromhex(a.decode()).decode() for a in fields[9].split(b",")] if fields[9] != b"-" else []
    os.setsid()
    private = root_fd is not None
    if private:  # the host maps its user namespace (and joins it to the cgroup) first
        _write_all(chan, b"U\n")  # the host reads this process's pid from the credentials
        if _read_line(chan) != b"G":
            os._exit(SETUP_FAILED)
        _build_private_root(libc, root_fd, work_fd, tmp_fd, proc)
        _loopback_up()
        _write_all(chan, b"B\n")
    else:
        _build_mounts(libc, work_fd, tmp_fd, proc)
        _loopback_up()
        _write_all(chan, b"B\n")  # the host reads this process's pid from the credentials
        if _read_line(chan) != b"G":
            os._exit(SETUP_FAILED)
    _check(libc.unshare(CLONE_NEWCGROUP), "unshare cgroup")
    _drop_privileges(libc, uid, (cpu, mem_kind, mem, nproc, fsize, nofile), bpf, private)
    os.dup2(chan, 0)
    os.dup2(chan, 1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.closerange(3, 1 << 20)
    os.chdir(JAIL_WORKDIR)
    return Job(code, args)


def _request(libc, ctl, msg, fds, code, bpf, private):
    """In the zygote's fork for one request: fresh namespaces, then the server in them.

    ``private`` (a worker that is root of a user namespace with one mapped uid): first a user
    namespace of the request's own, so that the namespaces made next belong to it and whatever
    capabilities the request holds reach nothing of the zygote's or of another request; the
    host maps its uid and gid (bubblewrap's jail uid onto the worker's, ``setgroups`` denied).
    The zygote's root tree is cloned before, while a clone of it is still unlocked."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ctl.close()
    chan, work_fd, tmp_fd = fds
    try:
        fields = msg.rstrip(b"\n").split(b" ")
        if len(fields) != 10 or fields[0] != b"Q":
            raise ValueError(f"malformed request {msg[:100]!r}")
        root_fd = None
        if private:
            root_fd = _open_tree(libc, "/")
            _check(libc.unshare(CLONE_NEWUSER), "unshare user")
        flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
        _check(libc.unshare(flags), "unshare")
        if os.fork() != 0:
            os._exit(0)  # the server is reparented to the zygote, which reaps it
        return _become_server(libc, chan, work_fd, tmp_fd, fields, code, bpf, root_fd)
    except BaseException as e:  # the jail could not be built: the host reports a sandbox failure
        with_text = f"E {type(e).__name__}: {e}".encode(errors="replace").replace(b"\n", b" ")[:400]
        try:
            _write_all(chan, with_text + b"\n")
        finally:
            os._exit(SETUP_FAILED)


def _program(ctl):
    """The program's source, sent first by the host: b"P LENGTH\\n" + source."""
    buf = b""
    while b"\n" not in buf:
        chunk = ctl.recv(4096)
        if not chunk or len(buf) > 64:
            raise SystemExit("zygote: no program")
        buf += chunk
    head, buf = buf.split(b"\n", 1)
    fields = head.split(b" ")
    if len(fields) != 2 or fields[0] != b"P":
        raise SystemExit("zygote: no program")
    size = int(fields[1])
    while len(buf) < size:
        chunk = ctl.recv(size - len(buf))
        if not chunk:
            raise SystemExit("zygote: no program")
        buf += chunk
    if len(buf) != size:
        raise SystemExit("zygote: no program")
    return buf.decode()


def _reap(_sig, _frame):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve():
    """The zygote's loop; returns only in a request's server, with the job it is to run."""
    if os.getpid() != 1:
        raise SystemExit("zygote: not the init of a PID namespace of its own; refusing to start")
    ctl = socket.socket(fileno=os.dup(0))
    code = compile(_program(ctl), "<string>", "exec")
    exec(code, {"__name__": "__distrs_zygote_warm__", "__builtins__": builtins})  # its imports, once
    gc.collect()
    gc.freeze()  # what is here now stays out of every fork's collections (no copy-on-write)
    with open(int(sys.argv[1]), "rb") as f:
        bpf = f.read()
    if sys.argv[2] not in ("pool", "private"):
        raise SystemExit("zygote: no mode")
    private = sys.argv[2] == "private"
    TMP_BINDS[:] = sys.argv[3:]
    if not bpf or len(bpf) % 8:
        raise SystemExit("zygote: no seccomp filter")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    libc = _libc()
    signal.signal(signal.SIGCHLD, _reap)
    ctl.sendall(b"Z " + PROTOCOL + b"\n")
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1024, 3)
        if not msg:
            raise SystemExit(0)
        if len(fds) != 3 or not msg.endswith(b"\n"):
            for fd in fds:
                os.close(fd)
            raise SystemExit("zygote: malformed request")
        if os.fork() == 0:
            return _request(libc, ctl, msg, fds, code, bpf, private)
        for fd in fds:
            os.close(fd)


def run(job):
    """Run the program as ``__main__`` of ``python -I -B -c PROGRAM ARGS``."""
    import importlib.machinery

    main = type(sys)("__main__")
    main.__dict__.update(
        __builtins__=builtins,
        __annotations__={},
        __loader__=importlib.machinery.BuiltinImporter,
        __spec__=None,
        __package__=None,
    )
    sys.modules["__main__"] = main
    sys.argv = ["-c", *job.args]
    exec(job.code, main.__dict__)
    os._exit(0)


if __name__ == "__main__":
    run(serve())
