"""Sessions under ``distrs up``: the pool starts from zero on the first create (the planner
sizes it, the local actuator starts a ``distrs session-worker`` host), state carries across
execs, and Ctrl-C with a session open ends everything: no process of a session survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from distrs.sandbox import SandboxSettings
from distrs.sandbox.factory import probe_bwrap
from tests.fixtures.service import free_port, wait_http
from tests.requirements import need

UID_BASE, UID_COUNT = 64300, 16
BOUND_S = 90.0  # the most any wait here takes (a bound, not a measurement)


def session_processes() -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                uid = d.stat().st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + UID_COUNT:
                found.append(int(d.name))
    return found


def test_sessions_through_distrs_up_and_nothing_left_after_ctrl_c(tmp_path: Path) -> None:
    reason = probe_bwrap(SandboxSettings())
    need("bubblewrap jail", "sessions run in it", found=reason is None, detail=reason or "")
    if os.geteuid() != 0:
        pytest.skip("counts the sessions' processes by their pool uids: needs root")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
    env.update(
        DISTRS_SANDBOX_WORKDIR_BASE=str(tmp_path / "sbx"),
        DISTRS_SANDBOX_UID_BASE=str(UID_BASE),
        DISTRS_SANDBOX_UID_COUNT=str(UID_COUNT),
        DISTRS_SESSION_SPARES_MIN="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "distrs.cli",
        "up",
        "--port",
        str(port),
        "--insecure",
        "--log-level",
        "warning",
    ]
    up = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/healthz", timeout_s=BOUND_S, proc=up)
        with httpx.Client(base_url=url, timeout=BOUND_S) as c:
            r = c.post("/v1/sessions", json={"task": "t", "language": "python"})
            assert r.status_code == 201, r.text  # the pool was at zero: the planner started a host
            sid = r.json()["session_id"]
            c.post(f"/v1/sessions/{sid}/exec", json={"code": "import os\nstate = os.getpid()"})
            r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "state == os.getpid(), os.getuid()"})
            value = r.json()["value"]
            assert value.startswith("(True, ") and int(value.split(", ")[1].rstrip(")")) >= UID_BASE
            deadline = time.monotonic() + BOUND_S
            stats: dict[str, object] = {}
            while time.monotonic() < deadline:  # the stats are the last sweep's (every second)
                stats = c.get("/v1/session-ops/stats").json()
                if stats.get("open") == 1:
                    break
                time.sleep(0.2)
            assert stats["open"] == 1 and len(stats["workers"]) == 1  # type: ignore[arg-type]
            assert session_processes()  # the session (and its spare) run as pool uids
        up.send_signal(signal.SIGINT)  # with the session open
        up.wait(BOUND_S)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
    deadline = time.monotonic() + 10
    while session_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes() == []
    mounts = Path("/proc/self/mounts").read_text()
    assert str(tmp_path) not in mounts  # every session's tmpfs was unmounted by its worker
