"""The jail command line: limits inside the namespaces, uid drop as root, binds and env."""

from __future__ import annotations

from distrs.sandbox.base import Limits, MemoryKind, Mounts, default_env
from distrs.sandbox.jail import (
    JAIL_WORKDIR,
    bwrap_args,
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


def test_root_jail_has_no_user_namespace_and_drops_to_uid_before_limits() -> None:
    cmd = jail_command(
        ["./prog", "x"], bwrap="bwrap", workdir="/w", limits=Limits(), env={}, mounts=Mounts(), uid=61000
    )
    assert "--unshare-user" not in cmd and "--unshare-all" not in cmd
    assert {"--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"} <= set(cmd)
    inner = cmd
    sep = inner.index("--")
    assert inner[sep + 1] == "setpriv" and "--reuid=61000" in inner
    assert inner.index("prlimit") > inner.index("--reuid=61000")
    assert cmd[-2:] == ["./prog", "x"]


def test_nonroot_jail_unshares_everything_and_no_setpriv() -> None:
    cmd = jail_command(
        ["true"], bwrap="bwrap", workdir="/w", limits=Limits(), env={}, mounts=Mounts(), uid=None
    )
    assert {"--unshare-all", "--unshare-user", "--disable-userns"} <= set(cmd)
    inner = cmd
    assert "setpriv" not in inner
    assert inner[inner.index("--") + 1] == "prlimit"


def test_workdir_is_the_only_writable_bind_and_env_is_explicit() -> None:
    env = default_env({"CUDA_VISIBLE_DEVICES": "0"})
    args = bwrap_args(
        bwrap="bwrap", workdir="/host/run-1", limits=Limits(), env=env, mounts=Mounts(), as_root=True
    )
    i = args.index("--bind")
    assert args[i + 1 : i + 3] == ["/host/run-1", JAIL_WORKDIR]
    assert args.count("--bind") == 1
    assert "--clearenv" in args
    setenv = [args[i + 1 : i + 3] for i, a in enumerate(args) if a == "--setenv"]
    assert ["CUDA_VISIBLE_DEVICES", "0"] in setenv
    assert all(k in dict(setenv) for k in ("PATH", "HOME", "LANG"))
    assert args.index("--clearenv") < args.index("--setenv")


def test_extra_paths_get_traversable_parents_once() -> None:
    mounts = Mounts(
        ro_paths=("/root/.pyenv/versions/3.11.7", "/root/.pyenv/other"), dev_paths=("/dev/nvidia0",)
    )
    args = bwrap_args(bwrap="bwrap", workdir="/w", limits=Limits(), env={}, mounts=mounts, as_root=True)
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


def test_tmpfs_is_sized() -> None:
    args = bwrap_args(
        bwrap="bwrap", workdir="/w", limits=Limits(tmpfs_bytes=12345), env={}, mounts=Mounts(), as_root=False
    )
    i = args.index("--tmpfs")
    assert args[i - 4 : i + 2] == ["--perms", "1777", "--size", "12345", "--tmpfs", "/tmp"]


def test_fallback_command_is_limits_around_argv() -> None:
    assert fallback_command(["a"], limits=Limits(), uid=None)[0] == "prlimit"
    cmd = fallback_command(["a"], limits=Limits(), uid=61001)
    assert cmd[0] == "setpriv" and cmd[-1] == "a" and "prlimit" in cmd
