"""The whole one-machine service as a user runs it: ``distrs up`` in one process, ``distrs replay``
in another, then Ctrl-C (SIGINT) drains the workers and stops cleanly with nothing left running."""

from __future__ import annotations

import csv
import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fixtures.service import free_port, wait_http


def write_trace(path: Path, tasks: int = 2, iterations: int = 2, batch: int = 12) -> Path:
    """A tiny distrs-trace/1 file: every request compiles 0.3-0.6 s, half execute 0.2 s."""
    rows = []
    for t in range(tasks):
        for it in range(iterations):
            start = t * 1.0 + it * 6.0
            for i in range(batch):
                status = "success" if i % 2 == 0 else "compile_failed"
                rows.append(
                    {
                        "task": f"task-{t}",
                        "iteration": it,
                        "request": i,
                        "rollout_start": start,
                        "arrival": start + 0.5 + 0.1 * i,
                        "status": status,
                        "s_compile": 0.3 + 0.03 * i,
                        "s_execute": 0.2 if status == "success" else 0.0,
                    }
                )
    rows.sort(key=lambda r: r["arrival"])
    csv_path = path / "tiny.csv.gz"
    with gzip.open(csv_path, "wt", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    meta = {
        "format": "distrs-trace/1",
        "mode": "colocated",
        "tasks": tasks,
        "iterations": iterations,
        "batch": batch,
        "requests": len(rows),
        "seed": 0,
        "stages": [
            {"name": "compile", "resource": "cpu", "timeout_s": 5.0, "cost": 1.0},
            {"name": "execute", "resource": "gpu", "timeout_s": 3.0, "cost": 8.0},
        ],
    }
    (path / "tiny.meta.json").write_text(json.dumps(meta))
    return csv_path


@pytest.mark.timeout(240)
def test_up_replay_then_ctrl_c_drains(tmp_path: Path) -> None:
    trace = write_trace(tmp_path)
    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text(yaml.safe_dump({"stages": {"compile": {"timeout_s": 5}, "execute": {"timeout_s": 3}}}))
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")},
        "DISTRS_DEFAULT_BATCH_SPAN_S": "10",
        "DISTRS_INTERVAL_S": "1",
    }
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distrs.cli",
            "up",
            "--port",
            str(port),
            "--insecure",
            "--config",
            str(cfg),
            "--max-workers",
            "4",
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/readyz", proc=up)
        out_json = tmp_path / "report.json"
        rep = subprocess.run(
            [
                sys.executable,
                "-m",
                "distrs.cli",
                "replay",
                "--trace",
                str(trace),
                "--url",
                url,
                "--speedup",
                "1",
                "--json",
                str(out_json),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert rep.returncode == 0, rep.stdout + rep.stderr
        report = json.loads(out_json.read_text())
        assert len(report["batches"]) == 4
        assert sum(sum(b["statuses"].values()) for b in report["batches"]) == 48
        for b in report["batches"]:
            assert b["statuses"] == {"ok": 6, "compile_error": 6} and b["extra_delay_s"] is not None
        assert report["busy_seconds"]["compile"] > 0 and report["worker_seconds"]["compile"] > 0
        stats = httpx.get(f"{url}/v1/stats").json()
        assert stats["last_plan"]["policy"] == "distrs"
        children = _children(up.pid)
        assert children, "up should have started worker processes"
    finally:
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=60)
    assert up.returncode == 0, out.decode()
    assert b"draining workers" in out
    assert all(not _alive(pid) for pid in children)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")
