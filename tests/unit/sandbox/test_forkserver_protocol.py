"""The host side of the fork server protocol: what it asks for, and what it accepts back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from distrs.sandbox import Limits, MemoryKind, Mounts, SandboxError, Termination
from distrs.sandbox.forkserver import SERVER_MEMORY_HEADROOM, parse_report, request_line, server_limits
from distrs.sandbox.jail import JailSpec, bwrap_args

MiB = 1 << 20


def test_request_line_carries_every_limit_and_the_input_length() -> None:
    limits = Limits(wall_s=2.5, cpu_s=2.0, memory_bytes=256 * MiB, nproc=64, fsize_bytes=MiB, nofile=128)
    assert request_line("ab12", limits, 7) == (
        f"R ab12 2.500000 2.000000 as {256 * MiB} 64 {MiB} 128 {limits.output_bytes} 7\n".encode()
    )
    unlimited = Limits(
        memory_bytes=None, memory_kind=MemoryKind.DATA, nproc=None, fsize_bytes=None, nofile=None
    )
    fields = request_line("x", unlimited, 0).split()
    assert fields[4:9] == [b"data", b"-1", b"-1", b"-1", b"-1"]


def test_the_server_gets_room_for_itself_and_no_cpu_limit_of_its_own() -> None:
    case = Limits(wall_s=1, cpu_s=1, memory_bytes=512 * MiB, nproc=64)
    jail = server_limits(case)
    assert jail.memory_bytes == 512 * MiB + SERVER_MEMORY_HEADROOM and jail.nproc == 65
    assert jail.effective_cpu_s > 60 and jail.wall_s > 60
    assert (jail.fsize_bytes, jail.nofile, jail.memory_kind) == (
        case.fsize_bytes,
        case.nofile,
        case.memory_kind,
    )
    free = server_limits(Limits(memory_bytes=None, nproc=None))
    assert free.memory_bytes is None and free.nproc is None


def test_a_well_formed_report() -> None:
    got = parse_report(b"D ab12 exited 256 0.012 0.010 3 5 0 1", "ab12", 100)
    assert got == (Termination.EXITED, 256, 0.012, 0.010, 3, 5, False, True)
    assert parse_report(b"D ab12 timeout 9 1.0 0.9 0 0 0 0", "ab12", 100)[0] is Termination.TIMEOUT


@pytest.mark.parametrize(
    "line",
    [
        b"D other exited 0 0.1 0.1 0 0 0 0",  # another request's id
        b"D ab12 fine 0 0.1 0.1 0 0 0 0",  # unknown termination
        b"D ab12 exited 0 0.1 0.1 101 0 0 0",  # more output than the cap
        b"D ab12 exited 0 0.1 0.1 0 -1 0 0",
        b"D ab12 exited 70000 0.1 0.1 0 0 0 0",  # not a wait status
        b"D ab12 exited 0 nan 0.1 0 0 0 0",
        b"D ab12 exited 0 0.1 -1 0 0 0 0",
        b"D ab12 exited 0 0.1 0.1 0 0 2 0",
        b"D ab12 exited 0 0.1 0.1 0 0 0",  # a field short
        b"D ab12 exited 0 0.1 0.1 0 0 0 0 0",
        b"D ab12 exited x 0.1 0.1 0 0 0 0",
        b"garbage",
        b"",
    ],
)
def test_anything_else_is_a_sandbox_failure(line: bytes) -> None:
    with pytest.raises(SandboxError):
        parse_report(line, "ab12", 100)


def test_a_server_that_could_not_start_a_case_says_why() -> None:
    with pytest.raises(SandboxError, match="cannot start the case: no memory"):
        parse_report(b"E ab12 cannot start the case: no memory", "ab12", 100)


def test_a_helper_can_be_its_jails_init() -> None:
    spec = JailSpec(bwrap="bwrap", workdir="/w", tmpdir=None, tmp_bytes=MiB)
    assert "--as-pid-1" not in bwrap_args(spec, {}, Mounts())  # runs keep bwrap's reaper as init
    args = bwrap_args(replace(spec, as_pid_1=True), {}, Mounts())
    assert "--as-pid-1" in args and "--unshare-all" in args  # only with a PID namespace of its own
    pool = bwrap_args(replace(spec, as_pid_1=True, pool_uid=61000), {}, Mounts())
    assert "--as-pid-1" in pool and "--unshare-pid" in pool
