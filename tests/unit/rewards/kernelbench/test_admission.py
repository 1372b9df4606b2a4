"""Build admission's CPU count: a build holds the CPUs it asked for, all or none; threads are
admitted in the order they asked; a deadline ends a wait; the CPUs counted are the cgroup quota's
where one is set (v2 and v1, the tightest of the cgroup and its ancestors)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from distrs.rewards.kernelbench.admission import CpuSlots, cgroup_cpus, machine_cpus


def test_a_build_gets_all_the_cpus_it_needs_or_waits(tmp_path: Path) -> None:
    cpus = CpuSlots(str(tmp_path), 3)
    a = cpus.acquire(2, time.monotonic() + 5)
    assert a is not None and a.cpus == 2 and cpus.in_use() == 2
    assert cpus.acquire(2, time.monotonic() + 0.3) is None  # one is free: not enough, nothing held
    assert cpus.in_use() == 2
    b = cpus.acquire(1, time.monotonic() + 5)
    assert b is not None and cpus.in_use() == 3
    a.release()
    a.release()  # idempotent
    b.release()
    assert cpus.in_use() == 0
    big = cpus.acquire(8, time.monotonic() + 5)  # more than there are: all of them
    assert big is not None and big.cpus == 3
    big.release()


def test_threads_are_admitted_in_the_order_they_asked(tmp_path: Path) -> None:
    cpus = CpuSlots(str(tmp_path), 1)
    first = cpus.acquire(1, time.monotonic() + 5)
    assert first is not None
    order: list[int] = []

    def ask(i: int) -> None:
        got = cpus.acquire(1, time.monotonic() + 30)
        assert got is not None
        order.append(i)
        time.sleep(0.05)
        got.release()

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=ask, args=(i,)))
        threads[-1].start()
        time.sleep(0.1)  # each asks after the one before
    first.release()
    for t in threads:
        t.join(30)
    assert order == [0, 1, 2, 3]


def test_the_cpus_counted_are_the_tightest_cgroup_quota(tmp_path: Path) -> None:
    (tmp_path / "kubepods" / "pod1").mkdir(parents=True)
    (tmp_path / "kubepods" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "kubepods" / "pod1" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpus("0::/kubepods/pod1\n", tmp_path) == 1.5
    v1 = tmp_path / "cpu,cpuacct" / "k8s" / "pod2"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("400000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpus("4:cpu,cpuacct:/k8s/pod2\n1:memory:/x\n", tmp_path) == 4.0
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert cgroup_cpus("4:cpu,cpuacct:/k8s/pod2\n", tmp_path) is None
    assert machine_cpus() >= 1
