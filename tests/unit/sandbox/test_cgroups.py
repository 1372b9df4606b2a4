"""RunCgroup's emptiness and pids budget, on plain directories standing in for a cgroup v1
hierarchy (the kernel's files are only read and written here, so files behave the same)."""

from __future__ import annotations

from pathlib import Path

from distrs.sandbox.cgroups import PIDS_HEADROOM, CgroupRoots, RunCgroup


def _cgroup(tmp_path: Path) -> RunCgroup:
    mem, pids = tmp_path / "memory", tmp_path / "pids"
    mem.mkdir()
    pids.mkdir()
    cg = RunCgroup(CgroupRoots(1, mem, pids), "distrs-uid-1")
    for d in (cg.memory, cg.pids):
        assert d is not None
        (d / "cgroup.procs").write_text("")
    assert cg.pids is not None
    (cg.pids / "pids.current").write_text("0\n")
    return cg


def test_a_member_task_means_not_empty(tmp_path: Path) -> None:
    cg = _cgroup(tmp_path)
    assert cg.empty()
    assert cg.pids is not None
    (cg.pids / "cgroup.procs").write_text("4242\n")
    assert not cg.empty()


def test_released_tasks_still_charged_do_not_hold_the_next_run(tmp_path: Path) -> None:
    # lazy RCU: every task has left the cgroup, the kernel has not yet uncharged three of them
    cg = _cgroup(tmp_path)
    assert cg.pids is not None
    (cg.pids / "pids.current").write_text("3\n")
    assert cg.empty()
    assert cg.wait_empty(0.01)
    cg.set(memory_bytes=1 << 28, pids=64)
    assert (cg.pids / "pids.max").read_text() == str(64 + PIDS_HEADROOM + 3)
    assert (cg.memory / "memory.limit_in_bytes").read_text() == str(1 << 28)


def test_no_stale_charge_gives_the_plain_budget_and_none_is_unlimited(tmp_path: Path) -> None:
    cg = _cgroup(tmp_path)
    assert cg.pids is not None
    cg.set(memory_bytes=None, pids=64)
    assert (cg.pids / "pids.max").read_text() == str(64 + PIDS_HEADROOM)
    cg.set(memory_bytes=None, pids=None)
    assert (cg.pids / "pids.max").read_text() == "max"
