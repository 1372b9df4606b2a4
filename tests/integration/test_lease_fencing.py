"""Fencing of lost leases with real processes: a worker frozen mid-run (SIGSTOP) loses its lease
within a few heartbeat periods, another worker runs the request, and when the frozen worker wakes
(SIGCONT) and reports, its late completion is refused: the result is the second worker's and was
recorded exactly once. Runs over the memory store (``distrs proxy`` alone) and over Redis. A worker
killed while it holds a lease bundle loses nothing and runs nothing twice."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.service import running_service

pytestmark = pytest.mark.slow


def _wait(what: str, cond: Any, timeout_s: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s}s")


def _request(c: httpx.Client) -> dict[str, Any]:
    body: dict[str, Any] = c.get("/v1/requests/fence/r0").json()
    return body


@pytest.mark.parametrize("backend", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_late_completion_of_a_frozen_worker_never_overwrites(
    backend: str, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("fresh_redis_server").url if backend == "redis" else None
    with running_service(workers={"compile": 1}, redis_url=redis_url, env={"DISTRS_LEASE_TTL_S": "6"}) as svc:
        c = svc.client()
        first = svc.workers[0]
        r = c.post("/v1/batches", json={"task": "fence", "batch_id": "b1", "size": 1})
        assert r.status_code == 201, r.text
        payload = {"durations": {"compile": 3.0}, "fail_stage": None, "status": "ok"}
        r = c.post(
            "/v1/requests",
            json={
                "task": "fence",
                "batch_id": "b1",
                "request_id": "r0",
                "reward_type": "synthetic",
                "payload": payload,
            },
        )
        assert r.status_code == 202, r.text
        _wait("first lease", lambda: _request(c)["state"] == "running")
        os.killpg(first.pid, signal.SIGSTOP)  # frozen holding the lease, mid-run
        try:
            stopped_at = time.monotonic()
            second = svc.start_worker("compile")
            _wait("batch complete", lambda: c.get("/v1/batches/fence/b1/results").json()["complete"])
            print(f"recovered {time.monotonic() - stopped_at:.1f} s after the holder froze")
            rec = _request(c)
            assert rec["attempts"] == 2
            host = socket.gethostname()
            assert [(s["name"], s["worker"]) for s in rec["result"]["stages"]] == [
                ("compile", f"{host}-{second.pid}")
            ]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGCONT)
        # the first worker wakes after its sleep ended, reports, and is refused
        _wait(
            "late completion refused", lambda: "rejected" in (svc.workdir / "worker-compile.log").read_text()
        )
        assert first.poll() is None  # a refusal is routine for a worker, not a crash
        body = c.get("/v1/batches/fence/b1/results").json()
        assert body["done"] == 1 and [x["request_id"] for x in body["results"]] == ["r0"]
        assert _request(c) == rec  # unchanged: recorded once, by the second worker


@pytest.mark.redis
def test_worker_killed_mid_bundle_loses_nothing_and_runs_nothing_twice(fresh_redis_server: Any) -> None:
    n = 60
    with running_service(workers={"compile": 1}, redis_url=fresh_redis_server.url) as svc:
        c = svc.client()
        assert c.post("/v1/batches", json={"task": "kb", "batch_id": "b1", "size": n}).status_code == 201
        reqs = [
            {
                "task": "kb",
                "batch_id": "b1",
                "request_id": f"r{i:03d}",
                "reward_type": "synthetic",
                # short runs: after the first the worker leases bundles of about five
                "payload": {"durations": {"compile": 0.05}, "fail_stage": None, "status": "ok"},
            }
            for i in range(n)
        ]
        assert c.post("/v1/requests", json={"requests": reqs}).json()["accepted"] == n
        _wait("some results", lambda: c.get("/v1/batches/kb/b1/results").json()["done"] >= 8)
        svc.kill_worker(0)  # SIGKILL, most likely holding a bundle
        svc.start_worker("compile")
        _wait("batch complete", lambda: c.get("/v1/batches/kb/b1/results").json()["complete"])
        body = c.get("/v1/batches/kb/b1/results").json()
        assert [r["request_id"] for r in body["results"]] == [q["request_id"] for q in reqs]
        assert body["done"] == n
        for r in body["results"]:
            assert r["status"] == "ok" and [s["name"] for s in r["stages"]] == ["compile"], r


def test_a_run_longer_than_the_lease_ttl_stays_alive_by_heartbeats() -> None:
    # a 3 s lease TTL (heartbeats every second) and a 7 s run: never requeued, run once
    with running_service(workers={"compile": 1}, env={"DISTRS_LEASE_TTL_S": "3"}) as svc:
        c = svc.client()
        assert c.post("/v1/batches", json={"task": "long", "batch_id": "b1", "size": 1}).status_code == 201
        payload = {"durations": {"compile": 7.0}, "fail_stage": None, "status": "ok"}
        body = {
            "task": "long",
            "batch_id": "b1",
            "request_id": "r0",
            "reward_type": "synthetic",
            "payload": payload,
        }
        assert c.post("/v1/requests", json=body).status_code == 202
        _wait("batch complete", lambda: c.get("/v1/batches/long/b1/results").json()["complete"])
        rec = c.get("/v1/requests/long/r0").json()
        assert rec["attempts"] == 1 and rec["result"]["status"] == "ok"
        assert [s["name"] for s in rec["result"]["stages"]] == ["compile"]
