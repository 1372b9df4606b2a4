"""Durability of the whole service over a real Redis (AOF): crashes lose nothing accepted.

Real processes throughout: ``redis-server`` (tests/fixtures/redis_server.py, ``appendfsync
always``), a ``distrs proxy`` and ``distrs worker`` processes (tests/fixtures/service.py), driven
over HTTP as a trainer would. Each test crashes one component with SIGKILL mid-batch and checks
that every accepted request still ends with exactly one result, and that nothing ran twice.
Results alone cannot show that (a run whose worker died, or whose report was lost, leaves no
result), so the workers keep an execution log (``DISTRS_EXECUTION_LOG``: one line per stage run,
written as it starts) and the executions are counted: exactly one per request and stage where no
fault could cost a lease (duplicate submissions, a batch after the faults), and where one did
(a killed proxy cuts a completion, the lease expires, the request runs again: at-least-once
execution), never the same lease attempt twice. A request's result carries one stage record per stage it passed (a
requeued attempt that never reported leaves none), and the batch's ``done`` count equals its size.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.redis_server import RedisServer
from tests.fixtures.service import running_service

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _requests(
    task: str, batch: str, n: int, durations: dict[str, float], prefix: str = "r"
) -> list[dict[str, Any]]:
    return [
        {
            "task": task,
            "batch_id": batch,
            "request_id": f"{prefix}{i:03d}",
            "reward_type": "synthetic",
            "payload": {"durations": durations, "fail_stage": None, "status": "ok"},
        }
        for i in range(n)
    ]


def _call(fn: Any, *args: Any, attempts: int = 100, **kw: Any) -> httpx.Response:
    """Retry through a restart window (connection refused / 503), as a trainer client would."""
    for _ in range(attempts):
        try:
            r: httpx.Response = fn(*args, **kw)
            if r.status_code != 503:
                return r
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no answer after {attempts} attempts")


def _wait_complete(c: httpx.Client, task: str, batch: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = _call(c.get, f"/v1/batches/{task}/{batch}/results", params={"wait_s": 5})
        assert r.status_code == 200, r.text
        body = r.json()
        if body["complete"]:
            return body
    raise AssertionError(f"batch {batch} not complete in {timeout_s}s: done={body.get('done')}")


def _wait_done_at_least(c: httpx.Client, task: str, batch: str, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = c.get(f"/v1/batches/{task}/{batch}/results")
        if r.status_code == 200 and r.json()["done"] >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} results of {batch} in {timeout_s}s")


def _executions(log: Path, task: str) -> dict[tuple[str, str], list[int]]:
    """(request_id, stage) -> the lease attempt of each time a worker started it (execution log)."""
    out: dict[tuple[str, str], list[int]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        e = json.loads(line)
        if str(e["task"]).endswith(f"/{task}"):
            out.setdefault((e["request_id"], e["stage"]), []).append(int(e["attempt"]))
    return out


def _env(tmp_path: Path) -> dict[str, str]:
    return {"DISTRS_EXECUTION_LOG": str(tmp_path / "executions.jsonl")}


def _ran(tmp_path: Path, body: dict[str, Any]) -> dict[tuple[str, str], list[int]]:
    """The executions of the batch ``body`` answers for (its request ids only)."""
    ids = {r["request_id"] for r in body["results"]}
    every = _executions(tmp_path / "executions.jsonl", body.get("task") or "")
    return {k: n for k, n in every.items() if k[0] in ids}


def _assert_exactly_once(
    body: dict[str, Any],
    ids: list[str],
    stages: list[str],
    executions: dict[tuple[str, str], list[int]],
    lossless: bool = False,
) -> None:
    """One result per request, each stage reported once, and counted executions: every run was
    a lease attempt of its own (no attempt ran twice); with ``lossless`` (no fault could cost a
    lease) exactly one run per request and stage."""
    got = [r["request_id"] for r in body["results"]]
    assert got == ids  # every accepted request, once each, in submission order
    assert body["done"] == len(ids)
    assert {rid for rid, _ in executions} == set(ids)  # nothing else ran
    for r in body["results"]:
        assert r["status"] == "ok", r
        ran = [s["name"] for s in r["stages"] if s["outcome"] != "lease_expired"]
        assert ran == stages, r  # each stage reported once
        for stage in stages:
            attempts = executions.get((r["request_id"], stage), [])
            assert attempts, (r["request_id"], stage, "never ran")
            assert len(set(attempts)) == len(attempts), (
                r["request_id"],
                stage,
                attempts,
            )  # no lease ran twice
            if lossless:
                assert attempts == [1], (r["request_id"], stage, attempts)


def _register(c: httpx.Client, task: str, batch: str, size: int) -> None:
    r = _call(c.post, "/v1/batches", json={"task": task, "batch_id": batch, "size": size})
    assert r.status_code in (200, 201), r.text


def test_kill_proxy_mid_batch(fresh_redis_server: RedisServer, tmp_path: Path) -> None:
    n = 40
    with running_service(
        workers={"compile": 2, "execute": 2}, redis_url=fresh_redis_server.url, env=_env(tmp_path)
    ) as svc:
        c = svc.client()
        _register(c, "kp", "b1", n)
        reqs = _requests("kp", "b1", n, {"compile": 0.05, "execute": 0.05})
        r = c.post("/v1/requests", json={"requests": reqs})
        assert r.status_code == 202 and r.json()["accepted"] == n
        _wait_done_at_least(c, "kp", "b1", 5)
        svc.kill_proxy()  # SIGKILL: no drain, in-flight HTTP calls are cut
        svc.start_proxy()
        # a trainer retrying its submission after the crash gets duplicates, nothing re-runs
        r = _call(c.post, "/v1/requests", json={"requests": reqs})
        assert r.status_code == 202 and r.json() == {**r.json(), "accepted": 0, "duplicates": n}
        body = _wait_complete(c, "kp", "b1")
        _assert_exactly_once(
            body, [q["request_id"] for q in reqs], ["compile", "execute"], _ran(tmp_path, body)
        )


def test_kill_worker_mid_lease_requeues(fresh_redis_server: RedisServer, tmp_path: Path) -> None:
    with running_service(workers={"compile": 1}, redis_url=fresh_redis_server.url, env=_env(tmp_path)) as svc:
        c = svc.client()
        _register(c, "kw", "b1", 1)
        reqs = _requests("kw", "b1", 1, {"compile": 3.0})
        assert c.post("/v1/requests", json={"requests": reqs}).status_code == 202
        deadline = time.monotonic() + 20
        while c.get("/v1/requests/kw/r000").json()["state"] != "running":
            assert time.monotonic() < deadline, "request never leased"
            time.sleep(0.05)
        svc.kill_worker(0)  # dies holding the lease
        svc.start_worker("compile")
        body = _wait_complete(c, "kw", "b1", timeout_s=40)
        _assert_exactly_once(body, ["r000"], ["compile"], _ran(tmp_path, body))
        assert _ran(tmp_path, body)[("r000", "compile")][-1] == 2  # the requeued attempt ran
        rec = c.get("/v1/requests/kw/r000").json()
        assert rec["attempts"] == 2  # the expired lease was requeued and leased again


def test_restart_redis_mid_batch(fresh_redis_server: RedisServer, tmp_path: Path) -> None:
    n = 40
    with running_service(
        workers={"compile": 2, "execute": 2}, redis_url=fresh_redis_server.url, env=_env(tmp_path)
    ) as svc:
        c = svc.client()
        _register(c, "kr", "b1", n)
        reqs = _requests("kr", "b1", n, {"compile": 0.05, "execute": 0.05})
        assert c.post("/v1/requests", json={"requests": reqs}).json()["accepted"] == n
        _wait_done_at_least(c, "kr", "b1", 5)
        fresh_redis_server.restart(hard=True)  # SIGKILL redis-server, start it on the same AOF
        body = _wait_complete(c, "kr", "b1")
        _assert_exactly_once(
            body, [q["request_id"] for q in reqs], ["compile", "execute"], _ran(tmp_path, body)
        )
        # the service is whole again: a new batch runs end to end
        _register(c, "kr", "b2", 3)
        more = _requests("kr", "b2", 3, {"compile": 0.01}, prefix="s")
        assert _call(c.post, "/v1/requests", json={"requests": more}).json()["accepted"] == 3
        b2 = _wait_complete(c, "kr", "b2")
        _assert_exactly_once(b2, ["s000", "s001", "s002"], ["compile"], _ran(tmp_path, b2), lossless=True)


def test_duplicate_submissions_never_run_twice(fresh_redis_server: RedisServer, tmp_path: Path) -> None:
    n = 20
    with running_service(workers={"compile": 2}, redis_url=fresh_redis_server.url, env=_env(tmp_path)) as svc:
        c = svc.client()
        _register(c, "dup", "b1", n)
        reqs = _requests("dup", "b1", n, {"compile": 0.02})
        first = c.post("/v1/requests", json={"requests": reqs[:12]}).json()
        assert first["accepted"] == 12
        # overlapping bulk, then one by one: only the new ones are accepted
        second = c.post("/v1/requests", json={"requests": reqs[6:]}).json()
        assert (second["accepted"], second["duplicates"]) == (8, 6)
        for q in reqs[:3]:
            one = c.post("/v1/requests", json=q).json()
            assert (one["accepted"], one["duplicates"]) == (0, 1)
        body = _wait_complete(c, "dup", "b1")
        _assert_exactly_once(
            body, [q["request_id"] for q in reqs], ["compile"], _ran(tmp_path, body), lossless=True
        )
        # after completion a resubmission is still a duplicate, and the result is unchanged
        again = c.post("/v1/requests", json={"requests": reqs}).json()
        assert (again["accepted"], again["duplicates"]) == (0, n)
        assert _wait_complete(c, "dup", "b1")["results"] == body["results"]
        # the other tenant cannot see (or submit into) this task
        other = svc.client(token="trainer-b-token")
        assert other.get("/v1/batches/dup/b1/results").status_code == 404
        assert other.post("/v1/requests", json=reqs[0]).status_code == 404
