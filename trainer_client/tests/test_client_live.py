"""The client against the real service: proxy and worker processes on loopback ports.

Skipped when the service package (``distrs``) is not importable, so the client distribution's
tests still run on their own.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest
from distrs_client import AuthenticationError, RewardClient, RewardResult

service = pytest.importorskip("tests.fixtures.service")
redis_fixtures = pytest.importorskip("tests.fixtures.redis_server")
fresh_redis_server = redis_fixtures.fresh_redis_server  # the fixture, for this module

TOKEN = service.TRAINER_A


def synthetic(i: int, run_s: float = 0.002) -> dict[str, object]:
    """Every 7th request fails at compile with wrong_answer; the rest pass."""
    if i % 7 == 3:
        return {"durations": {"compile": run_s}, "fail_stage": "compile", "status": "wrong_answer"}
    return {"durations": {"compile": run_s}}


def expected(i: int) -> tuple[str, float]:
    return ("wrong_answer", 0.0) if i % 7 == 3 else ("ok", 1.0)


@pytest.fixture(scope="module")
def svc() -> Iterator[object]:
    with service.running_service(workers={"compile": 2}) as s:
        yield s


def submit_over_time(
    client: RewardClient, task: str, batch_id: str, n: int, span_s: float, seed: int = 0
) -> list[str]:
    """Rollouts "finish" in random order over ``span_s`` seconds, from 4 generation threads."""
    ids = [f"{batch_id}-{i}" for i in range(n)]
    order = list(range(n))
    random.Random(seed).shuffle(order)
    shards = [order[k::4] for k in range(4)]
    submitted: list[str] = []
    lock = threading.Lock()

    def gen(shard: list[int]) -> None:
        per = span_s / max(1, len(shard))
        for i in shard:
            time.sleep(per * random.random() * 2)
            with lock:  # recorded in the order the client saw them
                client.submit(task, batch_id, ids[i], "synthetic", synthetic(i))
                submitted.append(ids[i])

    threads = [threading.Thread(target=gen, args=(s,)) for s in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return submitted


@pytest.mark.slow
def test_2048_rollouts_submitted_over_time_come_back_in_order(svc: object) -> None:
    n = 2048
    with RewardClient(svc.url, TOKEN) as client:  # type: ignore[attr-defined]
        client.start_batch("live", "b2048", n, "synthetic")
        order = submit_over_time(client, "live", "b2048", n, span_s=3.0)
        results = client.results("live", "b2048", timeout=120)
    assert [r.request_id for r in results] == order
    for r in results:
        i = int(r.request_id.rsplit("-", 1)[1])
        assert (r.status, r.score) == expected(i)
        assert [s.name for s in r.stages] == ["compile"]


def test_duplicate_and_retried_submissions_never_run_twice(svc: object) -> None:
    n = 64
    url = svc.url  # type: ignore[attr-defined]
    with RewardClient(url, TOKEN) as a, RewardClient(url, TOKEN) as b:
        a.start_batch("live", "dups", n, "synthetic")
        b.start_batch("live", "dups", n, "synthetic")  # idempotent re-registration
        for i in range(n):
            a.submit("live", "dups", f"d{i}", "synthetic", synthetic(i))
            a.submit("live", "dups", f"d{i}", "synthetic", synthetic(i))  # local duplicate
            b.submit("live", "dups", f"d{i}", "synthetic", synthetic(i))  # another process retrying
        b.flush()
        with svc.client() as raw:  # type: ignore[attr-defined]
            # A raw retry of a bulk that may have been applied already.
            body = {"requests": [{"task": "live", "batch_id": "dups", "request_id": "d0",
                                  "reward_type": "synthetic", "payload": synthetic(0)}]}  # fmt: skip
            r = raw.post("/v1/requests", json=body)
            assert r.status_code == 202 and r.json()["duplicates"] == 1 and r.json()["accepted"] == 0
        results = a.results("live", "dups", timeout=60)
        assert [x.request_id for x in results] == [f"d{i}" for i in range(n)]
        with svc.client() as raw:  # type: ignore[attr-defined]
            page = raw.get("/v1/batches/live/dups/results").json()
            assert page["done"] == n and len(page["results"]) == n
            for i in range(n):
                rec = raw.get(f"/v1/requests/live/d{i}").json()
                assert rec["state"] == "done" and rec["attempts"] == 1


def test_bad_token_is_a_clear_error(svc: object) -> None:
    with RewardClient(svc.url, "wrong") as client, pytest.raises(AuthenticationError):  # type: ignore[attr-defined]
        client.start_batch("live", "nope", 1)


def test_score_one_shot(svc: object) -> None:
    with RewardClient(svc.url, TOKEN) as client:  # type: ignore[attr-defined]
        r = client.score("synthetic", {"durations": {"compile": 0.001}}, task="live")
        assert r.ok and r.score == 1.0


def _restart_mid_batch(s: object, n: int, task: str) -> tuple[list[str], list[RewardResult]]:
    """Submit ``n`` rollouts over time; kill -9 the proxy a third of the way in; restart it."""
    killed = threading.Event()

    def chaos() -> None:
        time.sleep(0.6)
        s.kill_proxy()  # type: ignore[attr-defined]
        killed.set()
        time.sleep(0.8)  # clients see connection refused meanwhile
        s.start_proxy()  # type: ignore[attr-defined]

    with RewardClient(s.url, TOKEN, stall_s=5.0) as client:  # type: ignore[attr-defined]
        client.start_batch(task, "b", n, "synthetic")
        t = threading.Thread(target=chaos)
        t.start()
        order = submit_over_time(client, task, "b", n, span_s=2.0, seed=1)
        t.join()
        assert killed.is_set()
        results = client.results(task, "b", timeout=120)
    return order, results


@pytest.mark.slow
def test_proxy_killed_and_restarted_with_redis_loses_nothing(fresh_redis_server: object) -> None:
    n = 512
    url = fresh_redis_server.url  # type: ignore[attr-defined]
    with service.running_service(workers={"compile": 2}, redis_url=url) as s:
        order, results = _restart_mid_batch(s, n, "redis-restart")
        ids = [r.request_id for r in results]  # type: ignore[attr-defined]
        assert ids == order and len(set(ids)) == n  # every reward exactly once, in order
        for r in results:
            i = int(r.request_id.rsplit("-", 1)[1])  # type: ignore[attr-defined]
            assert (r.status, r.score) == expected(i)  # type: ignore[attr-defined]
        with s.client() as raw:
            page = raw.get("/v1/batches/redis-restart/b/results").json()
            assert page["complete"] and page["done"] == n and len(page["results"]) == n


@pytest.mark.slow
def test_proxy_restart_with_memory_store_is_recovered_by_resubmission() -> None:
    n = 256
    with service.running_service(workers={"compile": 2}) as s:
        order, results = _restart_mid_batch(s, n, "mem-restart")
        ids = [r.request_id for r in results]  # type: ignore[attr-defined]
        assert ids == order and len(set(ids)) == n
        # The restarted proxy knew nothing; the client re-registered the batch and re-sent what
        # had no result yet.
        with s.client() as raw:
            assert raw.get("/v1/batches/mem-restart/b/results").status_code == 200


def test_unreachable_service_fails_fast_with_a_small_budget() -> None:
    from distrs_client import RetryPolicy, ServiceUnavailableError

    port = service.free_port()
    with RewardClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(max_elapsed_s=0.2)) as client:
        t0 = time.monotonic()
        with pytest.raises(ServiceUnavailableError):
            client.start_batch("x", "y", 1)
        assert time.monotonic() - t0 < 5


def test_a_client_nobody_closed_posts_its_buffer_at_exit(svc: object) -> None:
    """A blocking client used without ``with``/``close()``: what it buffered still reaches the
    service when the interpreter exits, and the exit prints no pending-task warning."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = textwrap.dedent(
        f"""
        from distrs_client import RewardClient
        c = RewardClient({svc.url!r}, {TOKEN!r}, linger_s=30.0)  # nothing is posted before exit
        c.start_batch("exit-task", "exit-b", size=1, reward_type="synthetic")
        c.submit("exit-task", "exit-b", "exit-r0", "synthetic", {{"durations": {{"compile": 0.001}}}})
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert r.returncode == 0 and "Task was destroyed" not in r.stderr, r.stderr
    with RewardClient(svc.url, TOKEN) as c:
        assert [x.status for x in c.results("exit-task", "exit-b", timeout=30)] == ["ok"]
