"""Sessions through the real service: a ``distrs proxy`` process and ``distrs session-worker``
processes with real jails, over the memory store, Redis and Redis Cluster.

Multi-turn state over HTTP, files, state, rewards on the state, tenant scoping, quotas, bad input
named by field, idempotent execs, and every ended session answering its reason: deleted, expired,
lost (a worker killed in the middle of an exec), never a fresh state. Scale-down drains a worker
without ending the session it holds.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.service import TRAINER_B, Service, running_service

SESSION_ENV = {
    "DISTRS_SESSION_WORKER_TTL_S": "2",
    "DISTRS_SESSION_SWEEP_INTERVAL_S": "0.2",
    "DISTRS_SESSION_MAX_OPEN_PER_TENANT": "3",
    "DISTRS_SESSION_CREATE_WAIT_S": "20",
    "DISTRS_SESSION_POLL_WAIT_S": "0.5",
    "DISTRS_SANDBOX_UID_BASE": "64000",
    "DISTRS_SANDBOX_UID_COUNT": "32",
}


@pytest.fixture(
    scope="module",
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("cluster", marks=pytest.mark.redis),
    ],
)
def svc(request: pytest.FixtureRequest) -> Iterator[Service]:
    args: list[str] = []
    env = dict(SESSION_ENV)
    if request.param == "redis":
        env["DISTRS_REDIS_URL"] = str(request.getfixturevalue("redis_server").url)
    elif request.param == "cluster":
        env["DISTRS_REDIS_URL"] = str(request.getfixturevalue("redis_cluster").url)
        args = ["--redis-mode", "cluster"]
    with running_service(env=env, proxy_args=args) as s:
        s.start_session_worker()
        yield s


def open_session(c: httpx.Client, language: str = "python", **extra: Any) -> str:
    r = c.post("/v1/sessions", json={"task": "t", "language": language, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["session_id"])


def test_multi_turn_python_over_http(svc: Service) -> None:
    with svc.client() as c:
        sid = open_session(c, files={"data.txt": "40", "b.bin": {"content": "AAE=", "encoding": "base64"}})
        r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "x = int(open('data.txt').read())"})
        assert r.status_code == 200 and r.json()["error"] is None, r.text
        r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "print('hi')\nx + 2"})
        body = r.json()
        assert body["value"] == "42" and body["stdout"] == "hi\n" and body["state_survived"]
        r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "1/0"})
        assert r.json()["error"]["type"] == "ZeroDivisionError"
        state = c.get(f"/v1/sessions/{sid}").json()
        assert state["state"] == "open" and state["execs"] == 3 and state["task"] == "t"
        assert {"name": "x", "type": "int"} in state["kernel"]["globals"]
        assert c.put(f"/v1/sessions/{sid}/files/src/m.py", content=b"K = 5\n").status_code == 204
        r = c.post(
            f"/v1/sessions/{sid}/exec", json={"code": "import sys; sys.path.insert(0, 'src'); import m; m.K"}
        )
        assert r.json()["value"] == "5"
        assert c.get(f"/v1/sessions/{sid}/files/b.bin").content == b"\x00\x01"
        listed = {f["path"] for f in c.get(f"/v1/sessions/{sid}/files").json()["files"]}
        assert {"data.txt", "b.bin", "src/m.py"} <= listed
        assert c.get(f"/v1/sessions/{sid}/files/nope").json()["error"]["code"] == "file_not_found"
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        gone = c.post(f"/v1/sessions/{sid}/exec", json={"code": "x"})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_deleted"
        assert c.get(f"/v1/sessions/{sid}").json()["error"]["code"] == "session_deleted"


def test_bash_state_and_a_reward_on_the_state(svc: Service) -> None:
    with svc.client() as c:
        sid = open_session(c, "bash")
        c.post(f"/v1/sessions/{sid}/exec", json={"code": "mkdir w && cd w && echo 3 > n && export K=1"})
        r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "pwd; cat n; echo $K; exit 4"})
        assert r.json()["stdout"] == "/jail/work/w\n3\n1\n" and r.json()["exit_code"] == 4
        assert r.json()["state_survived"] is False  # exit ended the shell: said, not hidden
        c.post(f"/v1/sessions/{sid}/exec", json={"code": "cd w; N=$(cat n)"})
        tests = [
            {"code": "test $N -eq 3"},
            {"code": "echo $((N * 2))", "expected_stdout": "6"},
            {"code": "N=0; test $N -eq 3"},
        ]
        got = c.post(
            f"/v1/sessions/{sid}/reward", json={"reward_type": "tests", "payload": {"tests": tests}}
        ).json()
        assert got["score"] == pytest.approx(2 / 3) and [t["passed"] for t in got["detail"]["tests"]] == [
            True,
            True,
            False,
        ]
        assert (
            c.post(f"/v1/sessions/{sid}/exec", json={"code": "echo $N"}).json()["stdout"] == "3\n"
        )  # untouched
        c.delete(f"/v1/sessions/{sid}")


def test_an_exec_id_is_answered_once_and_never_run_twice(svc: Service) -> None:
    with svc.client() as c:
        sid = open_session(c)
        c.post(f"/v1/sessions/{sid}/exec", json={"code": "n = 0"})
        for _ in range(3):
            r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "n += 1\nn", "exec_id": "step-1"})
            assert r.json()["value"] == "1"
        conflict = c.post(f"/v1/sessions/{sid}/exec", json={"code": "n += 5", "exec_id": "step-1"})
        assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "exec_id_conflict"
        assert c.post(f"/v1/sessions/{sid}/exec", json={"code": "n"}).json()["value"] == "1"
        c.delete(f"/v1/sessions/{sid}")


def test_tenants_quotas_and_bad_input(svc: Service) -> None:
    with svc.client() as a, svc.client(TRAINER_B) as b:
        sid = open_session(a)
        other = b.post(f"/v1/sessions/{sid}/exec", json={"code": "1"})
        assert other.status_code == 404 and other.json()["error"]["code"] == "session_not_found"
        more = [open_session(a), open_session(a)]
        over = a.post("/v1/sessions", json={"task": "t", "language": "python"})
        assert over.status_code == 429 and over.json()["error"]["code"] == "session_quota_exceeded"
        for s in [sid, *more]:
            a.delete(f"/v1/sessions/{s}")
        cases = [
            ({"task": "t", "language": "ruby"}, "language"),
            ({"task": "t", "language": "python", "limits": {"memory_mb": 10**6}}, "limits.memory_mb"),
            ({"task": "t", "language": "python", "files": {"../x": "1"}}, "files.../x"),
            ({"task": "t", "language": "python", "surprise": 1}, "surprise"),
        ]
        for body, field in cases:
            r = a.post("/v1/sessions", json=body)
            assert r.status_code == 422 and field in r.json()["error"]["message"], (body, r.text)
        sid = open_session(a)
        r = a.post(f"/v1/sessions/{sid}/exec", json={"code": "1", "timeout_s": 10**6})
        assert r.status_code == 422 and "timeout_s" in r.json()["error"]["message"]
        assert a.post("/v1/sessions/not-an-id/exec", json={"code": "1"}).status_code == 422
        a.delete(f"/v1/sessions/{sid}")


def test_an_idle_session_expires_and_says_so(svc: Service) -> None:
    with svc.client() as c:
        sid = open_session(c, idle_timeout_s=0.5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = c.get(f"/v1/sessions/{sid}", params={"kernel": "false"})
            if r.status_code != 200:
                break
            time.sleep(0.3)  # a GET is not a call: it does not keep the session alive
        assert r.status_code == 410 and r.json()["error"]["code"] == "session_expired"
        r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "1"})
        assert r.status_code == 410 and r.json()["error"]["code"] == "session_expired"


def test_a_worker_killed_mid_exec_ends_its_sessions_lost() -> None:
    with running_service(env=SESSION_ENV) as svc:
        svc.start_session_worker()
        with svc.client() as c:
            sid = open_session(c)
            c.post(f"/v1/sessions/{sid}/exec", json={"code": "x = 1"})
            answer: dict[str, httpx.Response] = {}
            t = threading.Thread(
                target=lambda: answer.setdefault(
                    "r", c.post(f"/v1/sessions/{sid}/exec", json={"code": "import time; time.sleep(30)"})
                )
            )
            t.start()
            time.sleep(1.0)  # the exec is running in the worker
            svc.kill_worker(0)
            t.join(60)
            r = answer["r"]
            assert r.status_code == 410 and r.json()["error"]["code"] == "session_lost", r.text
            after = c.post(f"/v1/sessions/{sid}/exec", json={"code": "x"})
            assert after.status_code == 410 and after.json()["error"]["code"] == "session_lost"
            svc.start_session_worker()  # a new worker: new sessions work, the lost one stays lost
            fresh = open_session(c)
            assert c.post(f"/v1/sessions/{fresh}/exec", json={"code": "2"}).json()["value"] == "2"
            assert c.post(f"/v1/sessions/{sid}/exec", json={"code": "x"}).status_code == 410


def test_scale_down_drains_a_worker_without_ending_its_session() -> None:
    env = {**SESSION_ENV, "DISTRS_SESSION_CREATE_WAIT_S": "2"}
    with running_service(env=env) as svc:
        p = svc.start_session_worker("--control-stdin", stdin=subprocess.PIPE)
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"1\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"ready 1\n"
        with svc.client() as c:
            sid = open_session(c)
            c.post(f"/v1/sessions/{sid}/exec", json={"code": "x = 'kept'"})
            p.stdin.write(b"0\n")  # the planner scales the pool to zero
            p.stdin.flush()
            assert p.stdout.readline() == b"ready 0\n"
            r = c.post(f"/v1/sessions/{sid}/exec", json={"code": "x"})
            assert r.json()["value"] == "'kept'"  # still served by its draining worker
            refused = c.post("/v1/sessions", json={"task": "t", "language": "python"})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_session_capacity"
            p.stdin.write(b"1\n")  # back up: the drain is called off
            p.stdin.flush()
            assert p.stdout.readline() == b"ready 1\n"
            assert c.post(f"/v1/sessions/{sid}/exec", json={"code": "x"}).json()["value"] == "'kept'"
            c.delete(f"/v1/sessions/{sid}")
