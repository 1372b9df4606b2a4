"""The zygote's request line (pure)."""

from __future__ import annotations

from pathlib import Path

from distrs.sandbox import Limits, MemoryKind
from distrs.sandbox.zygote import id_maps, initial_user_namespace, private_proc_covered, request_line


def test_request_line_carries_uid_proc_every_rlimit_and_hex_arguments() -> None:
    limits = Limits(wall_s=2.5, memory_bytes=300, nproc=9, fsize_bytes=7, nofile=5)
    line = request_line(61003, True, limits, ["harness.py", "call", "two words"])
    fields = line.rstrip(b"\n").split(b" ")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert fields[:9] == [b"Q", b"61003", b"1", b"3", b"as", b"300", b"9", b"7", b"5"]
    assert [bytes.fromhex(a.decode()).decode() for a in fields[9].split(b",")] == [
        "harness.py",
        "call",
        "two words",
    ]


def test_unlimited_fields_no_arguments_and_the_data_kind() -> None:
    limits = Limits(
        cpu_s=0.2, memory_bytes=None, memory_kind=MemoryKind.DATA, nproc=None, fsize_bytes=None, nofile=None
    )
    fields = request_line(61000, False, limits, []).rstrip(b"\n").split(b" ")
    assert fields[2:] == [b"0", b"1", b"data", b"-1", b"-1", b"-1", b"-1", b"-"]


def test_only_the_initial_user_namespace_forks_requests_from_a_zygote() -> None:
    """A root worker in a user-namespaced pod maps a range of host uids, not all of them: its
    kernel refuses a request's fresh /proc, so it keeps a jail per request."""
    assert initial_user_namespace("         0          0 4294967295\n")
    assert not initial_user_namespace("         0     100000      65536\n")
    assert not initial_user_namespace("         0          0 4294967295\n      1 1 1\n")
    assert not initial_user_namespace("")


def test_a_private_requests_user_namespace_maps_the_jail_uid_onto_the_workers_with_setgroups_denied() -> None:
    """As bubblewrap maps its jail per request: setgroups denied before the gid map, one id each."""
    maps = id_maps(10001, 10002)
    assert list(maps) == ["setgroups", "uid_map", "gid_map"]
    assert maps == {"setgroups": "deny", "uid_map": "65534 10001 1\n", "gid_map": "65534 10002 1\n"}


def test_a_proc_with_parts_bubblewrap_would_cover_is_told_apart(tmp_path: Path) -> None:
    assert not private_proc_covered(tmp_path)  # none of sys, sysrq-trigger, irq, bus to write to
    (tmp_path / "status").write_text("")
    assert not private_proc_covered(tmp_path)
    (tmp_path / "irq").mkdir()
    assert private_proc_covered(tmp_path)
