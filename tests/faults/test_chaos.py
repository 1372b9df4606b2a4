"""Faults during load, all real processes: ``redis-server`` (AOF, ``appendfsync always``) behind a
connection-cutting TCP forwarder, two ``distrs proxy`` processes over it, ``distrs worker``
processes on both, and a ``distrs planner`` over the same faulty link.

While a trainer thread registers and fills batches through both proxies (retrying 503s and
resets, as ``distrs_client`` does), the test cuts every Redis link, takes the link down, kills
Redis with SIGKILL, kills a proxy with SIGKILL, stops a worker with SIGSTOP past its lease TTL
and kills another with SIGKILL. Then it asserts the invariants: every accepted request has
exactly one result (0 lost), each result passed each stage once (0 completed twice), results
read before the faults ended are unchanged at the end (0 changed), no HTTP 500 was answered to
any caller (the trainer counts its statuses; each worker logs every 5xx it gets, and the whole of
every worker log is counted), no proxy log holds an unhandled error anywhere in it (not only in
its last lines: every 503 logs a warning, so a 500 mid-fault would scroll out of a tail), and
the planner is alive and ready.
Recovery times (fault -> next completed batch) are reported, not asserted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.forwarder import Forwarder
from tests.fixtures.redis_server import RedisServer
from tests.fixtures.service import TRAINER_A, Service, free_port, running_service, stop_process, wait_http

pytestmark = [pytest.mark.redis, pytest.mark.slow]

BATCH = 12
DURATIONS = {"compile": 0.05, "execute": 0.05}
ENV = {
    "DISTRS_LEASE_TTL_S": "2",
    "DISTRS_HEARTBEAT_S": "0.4",
    "DISTRS_REAPER_INTERVAL_S": "0.25",
    "DISTRS_REDIS_CONNECT_TIMEOUT_S": "1",
    "DISTRS_RETRY_AFTER_S": "1",
}


class Trainer:
    """Fills batches through alternating proxies until stopped; records everything it saw."""

    def __init__(self, urls: list[str]) -> None:
        self.clients = [
            httpx.Client(base_url=u, headers={"Authorization": f"Bearer {TRAINER_A}"}, timeout=10)
            for u in urls
        ]
        self.statuses: dict[int, int] = {}
        self.submitted: dict[str, list[str]] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.n = 0

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(600):
            c = self.clients[(self.n + attempt) % len(self.clients)]
            try:
                r = c.request(method, path, **kw)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
            if r.status_code != 503:
                return r
            time.sleep(float(r.headers.get("Retry-After", "1")) / 4)
        raise AssertionError(f"{method} {path}: no answer")

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = f"b{self.n:03d}"
                r = self.call("POST", "/v1/batches", json={"task": "chaos", "batch_id": batch, "size": BATCH})
                assert r.status_code in (200, 201), r.text
                ids = [f"{batch}-r{i:02d}" for i in range(BATCH)]
                reqs = [
                    {
                        "task": "chaos",
                        "batch_id": batch,
                        "request_id": rid,
                        "reward_type": "synthetic",
                        "payload": {"durations": DURATIONS, "fail_stage": None, "status": "ok"},
                    }
                    for rid in ids
                ]
                for half in (reqs[: BATCH // 2], reqs[BATCH // 2 :]):
                    r = self.call("POST", "/v1/requests", json={"requests": half})
                    assert r.status_code == 202, r.text
                self.submitted[batch] = ids
                self.n += 1
                time.sleep(0.2)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def results(self, batch: str) -> dict[str, Any]:
        r = self.call("GET", f"/v1/batches/chaos/{batch}/results")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def completed_after(self, t: float, cap_s: float = 90.0) -> float:
        """Seconds from ``t`` until a batch registered after ``t`` completes (a report)."""
        first = self.n
        end = time.monotonic() + cap_s
        while time.monotonic() < end:
            done = [b for b in list(self.submitted)[first:] if self.results(b)["complete"]]
            if done:
                return round(time.monotonic() - t, 2)
            time.sleep(0.1)
        raise AssertionError(f"no batch completed within {cap_s}s of the fault")


def start_planner(svc: Service, redis_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **svc.env,
        "DISTRS_REDIS_URL": redis_url,
        "DISTRS_METRICS_PORT": str(port),
        "DISTRS_STORE_RETRY_S": "0.5",
    }
    env |= {"DISTRS_POLICY": "static", "DISTRS_STATIC_REPLICAS": "0"}  # plans, starts no workers itself
    cmd = [sys.executable, "-m", "distrs.cli", "planner", "--actuator", "local", "--proxy", svc.url]
    return subprocess.Popen(cmd, env=env, stdout=svc._log("planner"), stderr=subprocess.STDOUT)


@contextlib.contextmanager
def second_proxy(svc: Service) -> Iterator[Service]:
    other = Service(port=free_port(), workdir=svc.workdir / "p2", env=svc.env)
    other.workdir.mkdir()
    other.start_proxy()
    try:
        yield other
    finally:
        other.stop()


WORKER_5XX = re.compile(r"proxy answered (\d{3}) on (\S+)")
PROXY_ERRORS = ("unhandled error", "Exception in ASGI application")


def worker_statuses(*services: Service) -> dict[str, int]:
    """Every 5xx the workers were answered, ``STATUS PATH`` -> count, from their whole logs."""
    out: dict[str, int] = {}
    for svc in services:
        for text in svc.full_logs("worker").values():
            for status, path in WORKER_5XX.findall(text):
                key = f"{status} {re.sub(r'/leases/[^/]+/', '/leases/ID/', path)}"
                out[key] = out.get(key, 0) + 1
    return out


def proxy_errors(*services: Service) -> list[str]:
    """Lines of any proxy log, whole, that record an unhandled error."""
    return [
        f"{name}: {line}"
        for svc in services
        for name, text in svc.full_logs("proxy").items()
        for line in text.splitlines()
        if any(e in line for e in PROXY_ERRORS)
    ]


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    wait_http(url, timeout_s=60, proc=proc)


def test_invariants_hold_under_faults(
    fresh_redis_server: RedisServer, record_property: Callable[[str, object], None]
) -> None:
    redis = fresh_redis_server
    fwd = Forwarder(redis.port).start()
    recovery: dict[str, float] = {}
    try:
        with (
            running_service(workers={"compile": 2, "execute": 2}, redis_url=fwd.redis_url, env=ENV) as p1,
            second_proxy(p1) as p2,
        ):
            for stage in ("compile", "execute"):
                p2.start_worker(stage, *(["--reward-types", "synthetic"] if stage == "execute" else []))
            planner_port = free_port()
            planner = start_planner(p1, fwd.redis_url, planner_port)
            try:
                wait_ready(f"http://127.0.0.1:{planner_port}/readyz", planner)
                trainer = Trainer([p1.url, p2.url])
                trainer.thread.start()
                recovery["baseline"] = trainer.completed_after(time.monotonic())
                early = {b: body for b in list(trainer.submitted) if (body := trainer.results(b))["complete"]}
                assert early

                def fault(name: str, action: Callable[[], None]) -> None:
                    t = time.monotonic()
                    action()
                    recovery[name] = trainer.completed_after(t)

                fault("cut_all_redis_links", fwd.cut)

                def link_down() -> None:
                    fwd.set_down(True)
                    time.sleep(2)
                    fwd.set_down(False)

                fault("redis_link_down_2s", link_down)
                fault("redis_sigkill_restart", redis.restart)

                def kill_proxy() -> None:
                    p1.kill_proxy()
                    p1.start_proxy()

                fault("proxy_sigkill_restart", kill_proxy)
                stopped = p1.workers[0]

                def stop_worker() -> None:
                    os.killpg(stopped.pid, signal.SIGSTOP)
                    time.sleep(4)  # twice the lease TTL: its lease expires and is requeued
                    os.killpg(stopped.pid, signal.SIGCONT)

                fault("worker_sigstop_4s", stop_worker)

                def kill_worker() -> None:
                    p2.kill_worker(0)
                    p2.start_worker("compile")

                fault("worker_sigkill", kill_worker)
                trainer.stop.set()
                trainer.thread.join(120)
                assert trainer.error is None, repr(trainer.error)

                # 0 lost, 0 completed twice: every accepted request has one result per stage
                for batch, ids in trainer.submitted.items():
                    end = time.monotonic() + 90
                    body = trainer.results(batch)
                    while not body["complete"] and time.monotonic() < end:
                        body = trainer.call(
                            "GET", f"/v1/batches/chaos/{batch}/results", params={"wait_s": 5}
                        ).json()
                    assert body["complete"], f"{batch}: {body['done']}/{len(ids)}"
                    assert [r["request_id"] for r in body["results"]] == ids
                    assert body["done"] == len(ids)
                    for r in body["results"]:
                        assert r["status"] == "ok", r
                        assert [s["name"] for s in r["stages"]] == ["compile", "execute"], r
                # 0 changed
                for batch, before in early.items():
                    assert trainer.results(batch)["results"] == before["results"]
                # 0 HTTP 500, to any caller, and no unhandled error anywhere in any proxy log
                assert 500 not in trainer.statuses, trainer.statuses
                workers = worker_statuses(p1, p2)
                assert not [k for k in workers if k.startswith("500 ")], workers
                assert proxy_errors(p1, p2) == []
                # the planner lived through it all and is ready again
                assert planner.poll() is None
                wait_ready(f"http://127.0.0.1:{planner_port}/readyz", planner)
                report = {
                    "batches": len(trainer.submitted),
                    "statuses": trainer.statuses,
                    "worker_5xx": workers,
                    "recovery_s": recovery,
                }
                record_property("recovery", json.dumps(report))
                print("\nfault recovery (s, fault -> next batch complete):", json.dumps(report))
            finally:
                stop_process(planner)
    finally:
        fwd.stop()
