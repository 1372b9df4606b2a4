"""``tree_kill`` ends a process tree whole: descendants in sessions of their own and a process
forking all the while included, and it spares the process that calls it on its own tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

from distrs.worker import tree_kill
from tests.fixtures import processes

# Run by the root of the tree: a child in a session of its own with a child of its own, and a
# child that forks short-lived children without pause; all renamed to the marker.
TREE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    marker = sys.argv[1]
    def rename():
        with open("/proc/self/comm", "w") as f:
            f.write(marker)
    rename()
    if os.fork() == 0:
        os.setsid()
        rename()
        if os.fork() == 0:
            rename()
        time.sleep(300)
        os._exit(0)
    if os.fork() == 0:
        rename()
        while True:
            pid = os.fork()
            if pid == 0:
                rename()
                time.sleep(0.01)
                os._exit(0)
            os.waitpid(pid, 0)
    print("ready", flush=True)
    time.sleep(300)
    """
)


def _start_tree(marker: str) -> subprocess.Popen[str]:
    root = subprocess.Popen([sys.executable, "-c", TREE, marker], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None and root.stdout.readline() == "ready\n"
    return root


@pytest.mark.timeout(60)
def test_kill_tree_ends_every_descendant_and_the_root() -> None:
    marker = f"tk{uuid.uuid4().hex[:8]}"
    root = _start_tree(marker)
    try:
        processes.wait_until(lambda: len(processes.tree(root.pid)) >= 4, 10, "the tree built")
        before = processes.tree(root.pid)
        assert any(p.name == marker for p in before)
        killed = tree_kill.kill_tree(root.pid)
        assert root.wait(10) < 0  # killed by a signal
        assert len(killed) >= 3  # the session leader, its child, the forker (and what it forked)
        processes.wait_until(lambda: not processes.named(marker), 10, "no process of the tree left")
    finally:
        processes.kill_all(processes.named(marker))
        if root.poll() is None:
            root.kill()


@pytest.mark.timeout(60)
def test_kill_tree_of_itself_spares_the_caller() -> None:
    marker = f"tk{uuid.uuid4().hex[:8]}"
    code = TREE.replace(
        'print("ready", flush=True)',
        "from distrs.worker import tree_kill\n"
        "while len(tree_kill.descendants(os.getpid())) < 3: time.sleep(0.01)\n"
        "tree_kill.kill_tree(os.getpid())\n"
        'print("ready", flush=True)',
    )
    root = subprocess.Popen([sys.executable, "-c", code, marker], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None and root.stdout.readline() == "ready\n"  # it lived on
        assert not tree_kill.descendants(root.pid)
        processes.wait_until(
            lambda: [p.pid for p in processes.named(marker)] == [root.pid], 10, "only the caller left"
        )
    finally:
        root.kill()
        root.wait(10)
        processes.kill_all(processes.named(marker))
