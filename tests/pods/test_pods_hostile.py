"""The red team's hostile set through the release as users deploy it.

Containers start from the rendered chart with exactly its security contexts (tests/pods/cluster.py):
the default `helm install` (sandbox.mode seccompProfile: the chart's Localhost profile, installed
into the harness's kubelet seccomp root as the chart's DaemonSet would), user-namespaced pods, and
a plain RuntimeDefault pod (Docker's default profile, as containerd/CRI-O apply it). Each hostile
program is a `python` submission that reports what it managed to do; the verdicts say the attack
failed, and a correct submission after them still scores 1.
"""

from __future__ import annotations

import textwrap
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.fixtures import hostile_programs as hostile
from tests.pods.cluster import System, auth_header
from tests.pods.test_pods_release import judge

pytestmark = [pytest.mark.pods, pytest.mark.timeout(1800)]

BASE: dict[str, Any] = {
    "proxy": {"replicas": 1},
    "planner": {"intervalSeconds": 1, "workerStartSeconds": 0},
    "workers": {"stages": {"execute": {"enabled": False}, "compile": {"enabled": False}}},
}


def _py(code: str, expected: str = "safe", **extra: Any) -> tuple[str, dict[str, Any]]:
    src = textwrap.dedent(code).strip() + "\n"
    return "python", {"code": src, "tests": [{"stdin": "", "expected_stdout": expected}], **extra}


def hostile_set(s: System) -> dict[str, tuple[str, dict[str, Any]]]:
    # every Service of the release by its DNS names, and every container by its address
    services: list[tuple[str, int]] = []
    for svc in (o for o in s.objects if o["kind"] == "Service"):
        name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
        for port in svc["spec"]["ports"]:
            services += [
                (h, port["port"]) for h in (name, f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local")
            ]
    for c in s.containers.values():
        services += [(c.ip, 8000), (c.ip, 6379)]
    return {
        "token via /proc/*/environ": _py(
            f"""
            import os
            hits = []
            for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
                try:
                    data = open(f"/proc/{{pid}}/environ", "rb").read()
                except OSError:
                    continue
                if b"DISTRS" in data or {s.worker_token.encode()!r} in data:
                    hits.append(pid)
            print("safe" if not hits else f"found {{hits}}")
            """
        ),
        "secrets in its own environment": _py(
            """
            import os
            bad = [k for k in os.environ if any(w in k for w in ("TOKEN", "REDIS", "DISTRS", "KUBERNETES"))]
            print("safe" if not bad else f"found {bad}")
            """
        ),
        "connect to the proxy or Redis": _py(
            f"""
            import socket
            reached = []
            for host, port in {services!r}:
                try:
                    socket.create_connection((host, port), timeout=2).close()
                    reached.append(host)
                except OSError:
                    pass
            print("safe" if not reached else f"reached {{reached}}")
            """
        ),
        "write outside the work dir": _py(
            """
            wrote = []
            for p in ("/opt/distrs/x", "/usr/x", "/etc/x", "/scratch/x", "/var/run/secrets/x", "/x",
                      "/dev/x", "/dev/shm/x", "/jail/x"):
                try:
                    open(p, "w").write("x")
                    wrote.append(p)
                except OSError:
                    pass
            print("safe" if not wrote else f"wrote {wrote}")
            """
        ),
        "1 GiB disk fill": (
            "python",
            {"code": hostile.DISK_FILL, "tests": [{"stdin": "", "expected_stdout": "safe"}]},
        ),
        "100,000 files": (
            "python",
            {"code": hostile.MANY_FILES, "tests": [{"stdin": "", "expected_stdout": "safe"}]},
        ),
        "user namespaces and mount": (
            "python",
            {"code": hostile.NAMESPACES_AND_MOUNT, "tests": [{"stdin": "", "expected_stdout": "safe"}]},
        ),
        "fork bomb": _py(
            """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """,
            time_limit_s=3,
        ),
        "memory hog": _py(
            """
            chunks = []
            while True:
                chunks.append(bytearray(64 << 20))
            """,
        ),
    }


GOOD = (
    "python",
    {
        "code": "print(sum(map(int, input().split())))\n",
        "tests": [{"stdin": "1 2\n", "expected_stdout": "3\n"}],
    },
)


def _assert_contained(s: System) -> None:
    attacks = hostile_set(s)
    names = list(attacks)
    results = judge(s, [attacks[n] for n in names] + [GOOD], wait_s=600)
    by_name = dict(zip([*names, "good"], results, strict=True))
    for name, r in by_name.items():
        detail = str(r.get("detail"))
        assert s.worker_token not in detail, f"{name}: the worker token reached a result"
        if name == "fork bomb":
            assert r["status"] in ("timeout", "runtime_error"), (name, r)
        elif name == "memory hog":
            assert r["status"] == "memory_limit_exceeded", (name, r)
        else:
            assert r["status"] == "ok" and r["score"] == 1.0, (name, r)
        assert r["detail"].get("isolation") == "bwrap", (name, r)
    # the worker still judges correctly afterwards
    assert judge(s, [GOOD])[0]["score"] == 1.0
    assert s.ready(s.workers["run"])


def test_default_install_contains_the_hostile_set(pod_system: Callable[..., System]) -> None:
    """`helm install` with defaults: the chart's own Localhost profile, non-root workers."""
    s = pod_system(BASE)
    spec = s.containers[s.workers["run"]].spec
    assert spec["securityContext"]["seccompProfile"]["type"] == "Localhost"
    assert spec["securityContext"]["runAsNonRoot"] is True
    _assert_contained(s)
    # the python type forks each request from its zygote here too (a user namespace per request):
    # a case inherits the zygote's own imports (socket), which a server started per request lacks
    code = "import os, sys\nprint(os.getuid(), os.getgid(), 'socket' in sys.modules)"
    (r,) = judge(s, [_py(code, "65534 65534 True")])
    assert r["status"] == "ok", r


def test_user_namespaced_pods_contain_the_hostile_set(pod_system: Callable[..., System]) -> None:
    s = pod_system({**BASE, "sandbox": {"mode": "userNamespace"}})
    assert s.containers[s.workers["run"]].spec["hostUsers"] is False
    _assert_contained(s)
    # every run has a uid of its own from the pool, not the worker's
    (r,) = judge(s, [_py("import os; print(os.getuid())", "x")])
    uid = int(r["detail"]["tests"][0]["stdout"].strip())
    assert 61000 <= uid < 61256, r


def test_runtime_default_refuses_with_one_line_naming_the_setting(pod_system: Callable[..., System]) -> None:
    """A pod the jail cannot be built in runs nothing and says which value to change."""
    values = {**BASE, "sandbox": {"mode": "runtimeDefault"}}
    s = pod_system(values, wait_workers=False)
    run = s.workers["run"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "SANDBOX UNAVAILABLE" not in s.logs(run):
        time.sleep(1)
    logs = s.logs(run)
    lines = [ln for ln in logs.splitlines() if "SANDBOX UNAVAILABLE" in ln]
    assert lines, logs[-3000:]
    assert "sandbox.mode=seccompProfile" in lines[0] and "sandbox.allowDegraded=true" in lines[0]
    assert not s.ready(run)
    # and it runs nothing: a submission stays queued
    task, batch = "pods-refused", uuid.uuid4().hex[:8]
    with httpx.Client(base_url=s.proxy_url, headers=auth_header(s.trainer_token), timeout=30) as c:
        assert c.post("/v1/batches", json={"task": task, "batch_id": batch, "size": 1}).status_code == 201
        rt, payload = GOOD
        req = {"task": task, "batch_id": batch, "request_id": "r0", "reward_type": rt, "payload": payload}
        assert c.post("/v1/requests", json=req).status_code == 202
        time.sleep(10)
        state = c.get(f"/v1/requests/{task}/r0").json()
    assert state["state"] == "queued", state
