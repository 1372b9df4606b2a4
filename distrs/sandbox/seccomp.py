"""The seccomp filter every jailed program runs under, compiled with libseccomp.

bubblewrap loads it (``--seccomp FD``) just before it execs the program, so bwrap itself can still
build the namespaces while the program cannot build its own: it may not create user namespaces
(``unshare``/``clone`` with ``CLONE_NEWUSER``; ``clone3`` answers ENOSYS so libc falls back to
``clone``), enter or create other namespaces, mount or unmount anything, or use the kernel
interfaces a judged program never needs (keyrings, BPF, perf, userfaultfd, ptrace of anything,
kernel modules, reboot, clock and swap control). Everything else is allowed: the filter narrows
what the container's own profile (RuntimeDefault or the chart's Localhost profile) permits.
This holds in both jail modes: as root (programs drop to a pool uid before bwrap) and non-root.

Why ctypes: libseccomp is the well-kept C library every container runtime uses to build such
filters, and Debian installs it with apt. Its official Python binding is not on PyPI and the one
that is (``pyseccomp``) has not been released since 2021; we need five functions of the stable C
API, bound here directly.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
CLONE_NEWUSER = 0x10000000


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


# Refused with EPERM. Namespaces and mounts first: with them a program could become root of a
# fresh user namespace and remount its view of the jail.
DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "chroot",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "acct",
    "quotactl",
    "syslog",
    "name_to_handle_at",
    "open_by_handle_at",
)


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or refused to build the filter."""


def _lib() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as e:
        raise SeccompUnavailable(f"libseccomp.so.2 not found ({e}); install libseccomp2") from e
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.cache
def jail_filter() -> bytes:
    """The compiled BPF program (classic BPF, as ``seccomp_export_bpf`` writes it)."""
    lib = _lib()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    add = lib.seccomp_rule_add
    try:
        for name in DENIED:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a syscall on this architecture
                continue
            add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
            if add(ctx, _errno(errno.EPERM), nr, 0) != 0:
                raise SeccompUnavailable(f"cannot add a rule for {name}")
        nr = lib.seccomp_syscall_resolve_name(b"clone3")
        if nr >= 0 and add(ctx, _errno(errno.ENOSYS), nr, 0) != 0:
            raise SeccompUnavailable("cannot add a rule for clone3")
        nr = lib.seccomp_syscall_resolve_name(b"clone")
        add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, _ArgCmp]
        # clone(flags, ...): the flags are argument 0 on x86-64 and arm64.
        cmp = _ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        if add(ctx, _errno(errno.EPERM), nr, 1, cmp) != 0:
            raise SeccompUnavailable("cannot add the clone(CLONE_NEWUSER) rule")
        fd = os.memfd_create("distrs-seccomp", os.MFD_CLOEXEC)
        try:
            if lib.seccomp_export_bpf(ctx, fd) != 0:
                raise SeccompUnavailable("seccomp_export_bpf failed")
            size = os.lseek(fd, 0, os.SEEK_END)
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
