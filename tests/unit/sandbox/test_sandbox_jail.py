"""The jail command line: limits inside the namespaces, uid drop as root, binds and env."""

from __future__ import annotations

from distrs.sandbox.base import Limits, MemoryKind, Mounts, default_env
from distrs.sandbox.jail import (
    JAIL_UID,
    JAIL_WORKDIR,
    JailSpec,
    bwrap_args,
    etc_files,
    fallback_command,
    jail_command,
    prlimit_args,
    setpriv_args,
)


def _pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_prlimit_sets_every_limit_and_cpu_soft_below_hard() -> None:
    args = prlimit_args(Limits(wall_s=2.5, memory_bytes=100, nproc=7, fsize_bytes=9, nofile=11))
    assert args[0] == "prlimit" and args[-1] == "--"
    assert "--cpu=3:4" in args  # ceil(2.5) soft (SIGXCPU), +1 hard (SIGKILL)
    assert {"--as=100", "--nproc=7", "--fsize=9", "--nofile=11", "--core=0"} <= set(args)


def test_prlimit_data_kind_and_unlimited_fields() -> None:
    args = prlimit_args(Limits(memory_bytes=5, memory_kind=MemoryKind.DATA, nproc=None, nofile=None))
    assert "--data=5" in args and not any(a.startswith("--as") for a in args)
    assert not any(a.startswith(("--nproc", "--nofile")) for a in args)


def test_explicit_cpu_limit_wins_over_wall() -> None:
    assert "--cpu=1:2" in prlimit_args(Limits(wall_s=30, cpu_s=0.2))


def test_setpriv_drops_groups_caps_and_new_privs() -> None:
    args = setpriv_args(61234)
    assert {"--reuid=61234", "--regid=61234", "--clear-groups", "--no-new-privs"} <= set(args)
    assert "--bounding-set=-all" in args


def _spec(**kw: object) -> JailSpec:
    base: dict[str, object] = dict(bwrap="bwrap", workdir="/w", tmpdir="/s/tmp", tmp_bytes=1 << 20)
    base.update(kw)
    return JailSpec(**base)  # type: ignore[arg-type]


def test_pool_jail_has_no_user_namespace_and_drops_to_the_run_uid_inside() -> None:
    cmd = jail_command(
        ["./prog", "x"], _spec(pool_uid=61000, seccomp_fd=7), limits=Limits(), env={}, mounts=Mounts()
    )
    assert "--unshare-user" not in cmd and "--unshare-all" not in cmd
    assert {"--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"} <= set(cmd)
    sep = cmd.index("--")
    assert cmd[sep + 1] == "setpriv" and "--reuid=61000" in cmd and "--no-new-privs" in cmd
    assert cmd.index("prlimit") > cmd.index("--reuid=61000")
    assert _pairs(cmd, "--seccomp") == ["7"]  # the filter is on before setpriv runs
    assert cmd[-2:] == ["./prog", "x"]


def test_unprivileged_jail_is_a_user_namespace_without_capabilities() -> None:
    cmd = jail_command(["true"], _spec(seccomp_fd=3), limits=Limits(), env={}, mounts=Mounts())
    assert {"--unshare-all", "--unshare-user"} <= set(cmd)
    assert _pairs(cmd, "--uid") == [str(JAIL_UID)] and _pairs(cmd, "--cap-drop") == ["ALL"]
    assert "setpriv" not in cmd
    assert cmd[cmd.index("--") + 1] == "prlimit"


def test_cgroup_trampoline_comes_first() -> None:
    cmd = jail_command(
        ["true"], _spec(), limits=Limits(), env={}, mounts=Mounts(), trampoline=["sh", "-c", "x"]
    )
    assert cmd[:4] == ["sh", "-c", "x", "bwrap"]


def test_workdir_and_tmp_are_the_only_writable_binds_and_env_is_explicit() -> None:
    env = default_env({"CUDA_VISIBLE_DEVICES": "0"})
    args = bwrap_args(_spec(workdir="/host/run-1/work", tmpdir="/host/run-1/tmp"), env, Mounts())
    assert [args[i + 1 : i + 3] for i, a in enumerate(args) if a == "--bind"] == [
        ["/host/run-1/tmp", "/tmp"],
        ["/host/run-1/work", JAIL_WORKDIR],
    ]
    assert "--tmpfs" not in args
    # the rest of the jail's own tree is read-only, after every mount is in place
    assert args[args.index("--remount-ro") :][:4] == ["--remount-ro", "/dev", "--remount-ro", "/"]
    assert args.index("--remount-ro") > max(i for i, a in enumerate(args) if a == "--bind")
    assert "--clearenv" in args
    setenv = [args[i + 1 : i + 3] for i, a in enumerate(args) if a == "--setenv"]
    assert ["CUDA_VISIBLE_DEVICES", "0"] in setenv
    assert all(k in dict(setenv) for k in ("PATH", "HOME", "LANG"))
    assert args.index("--clearenv") < args.index("--setenv")


def test_jail_etc_files_are_bound_read_only() -> None:
    args = bwrap_args(_spec(etc_dir="/b/.jail/etc"), {}, Mounts())
    ro = [args[i + 1 : i + 3] for i, a in enumerate(args) if a == "--ro-bind"]
    assert ["/b/.jail/etc/hosts", "/etc/hosts"] in ro and ["/b/.jail/etc/passwd", "/etc/passwd"] in ro
    files = etc_files()
    assert "127.0.0.1\tlocalhost" in files["hosts"] and f":{JAIL_UID}:" in files["passwd"]


def test_extra_paths_get_traversable_parents_once() -> None:
    mounts = Mounts(
        ro_paths=("/root/.pyenv/versions/3.11.7", "/root/.pyenv/other"), dev_paths=("/dev/nvidia0",)
    )
    args = bwrap_args(_spec(pool_uid=61000), {}, mounts)
    dirs = _pairs(args, "--dir")
    assert dirs.count("/root") == 1 and dirs.count("/root/.pyenv") == 1
    assert "/root/.pyenv/versions" in dirs
    # each created dir is 0755 (bwrap as root would make it 0700, unreachable for the run's uid)
    for i, a in enumerate(args):
        if a == "--dir":
            assert args[i - 2 : i] == ["--perms", "0755"]
    assert args[
        args.index("/root/.pyenv/versions/3.11.7") : args.index("/root/.pyenv/versions/3.11.7") + 2
    ] == ["/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7"]
    assert _pairs(args, "--dev-bind-try") == ["/dev/nvidia0"]
    assert "/sys" not in args


def test_tmpfs_is_sized_when_the_session_has_none() -> None:
    args = bwrap_args(_spec(tmpdir=None, tmp_bytes=12345), {}, Mounts())
    i = args.index("--tmpfs")
    assert args[i - 4 : i + 2] == ["--perms", "1777", "--size", "12345", "--tmpfs", "/tmp"]


def test_fallback_command_is_limits_around_argv() -> None:
    assert fallback_command(["a"], limits=Limits(), uid=None)[0] == "prlimit"
    cmd = fallback_command(["a"], limits=Limits(), uid=61001, trampoline=["sh", "-c", "j"])
    assert cmd[:4] == ["sh", "-c", "j", "setpriv"] and cmd[-1] == "a" and "prlimit" in cmd


def test_without_proc_a_run_may_get_a_static_self_exe_link_and_nothing_else_of_proc() -> None:
    mounts = Mounts(self_exe="/usr/lib/jvm/jdk/bin/java")
    args = bwrap_args(_spec(proc=False), {}, mounts)
    assert "--proc" not in args and not any(
        a.startswith("/proc") and a != "/proc" for a in _pairs(args, "--ro-bind")
    )
    assert [args[i + 1 : i + 3] for i, a in enumerate(args) if a == "--symlink"][-1] == [
        "/usr/lib/jvm/jdk/bin/java",
        "/proc/self/exe",
    ]
    assert "/proc/self" in _pairs(args, "--dir")
    # made on the jail's root before it is remounted read-only: the program cannot change it
    assert args.index("/proc/self/exe") < args.index("--remount-ro")
    # where a fresh procfs is mounted, it is the real one; without self_exe there is no /proc at all
    with_proc = bwrap_args(_spec(proc=True), {}, mounts)
    assert _pairs(with_proc, "--proc") == ["/proc"] and "/proc/self/exe" not in with_proc
    assert not any(a.startswith("/proc") for a in bwrap_args(_spec(proc=False), {}, Mounts()))


def test_a_zygotes_jail_is_root_of_its_namespaces_with_empty_mount_points_and_no_filter() -> None:
    """The zygote itself runs no request's code: each request's fork drops to its uid, rlimits
    and the seccomp filter (zygote_child.py), which the zygote's own jail must not hold, and
    mounts the session's work dir and /tmp where this jail has empty directories."""
    spec = JailSpec(bwrap="bwrap", workdir="", tmpdir=None, tmp_bytes=0, seccomp_fd=7, zygote=True)
    cmd = jail_command(["python", "-c", "src"], spec, limits=Limits(), env={}, mounts=Mounts())
    assert "--unshare-user" not in cmd and "--seccomp" not in cmd
    assert {"--unshare-pid", "--unshare-net", "--unshare-ipc", "--as-pid-1", "--die-with-parent"} <= set(cmd)
    assert "setpriv" not in cmd and "prlimit" not in cmd
    assert cmd[cmd.index("--") + 1 :] == ["python", "-c", "src"]
    assert _pairs(cmd, "--dir")[-1] == JAIL_WORKDIR and "/tmp" in _pairs(cmd, "--dir")
    assert not _pairs(cmd, "--bind") and "--tmpfs" not in cmd  # nothing writable of its own
    assert _pairs(cmd, "--remount-ro")[-1] == "/"
