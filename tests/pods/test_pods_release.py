"""The release as users deploy it: built images, run from the rendered chart under podman.

Redis, proxy, planner and one worker per stage start as containers made from the rendered pod
templates (tests/pods/cluster.py). Judged submissions go through the proxy and are scored by
workers inside their images' sandbox; a short synthetic trace replays with every batch complete.
The workers run under the chart's own Localhost seccomp profile, which the harness installs into
its kubelet seccomp root from the rendered ConfigMap, as the chart's DaemonSet does on nodes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.batches import submit_and_wait
from tests.pods.cluster import System, auth_header
from tests.pods.podspec import Unsupported

pytestmark = [pytest.mark.pods, pytest.mark.timeout(1800)]

VALUES: dict[str, Any] = {
    "proxy": {"replicas": 1},
    "planner": {"intervalSeconds": 1, "workerStartSeconds": 0},
    "workers": {
        "stages": {"execute": {"rewardTypes": ["synthetic"]}},
    },
}
ADD = [{"stdin": "1 2\n", "expected_stdout": "3\n"}, {"stdin": "40 2\n", "expected_stdout": "42\n"}]
CPP_OK = "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n"
CPP_STDCXX = (
    "#include <bits/stdc++.h>\nusing namespace std;\nint main(){long a,b;cin>>a>>b;cout<<a+b<<endl;}\n"
)
# Run in the compile worker's container (its user, environment and image): which precompiled
# header the judge's compiles get, and whether that compiler with those flags uses it (-H "!").
PCH_PROBE = """
import json, os, subprocess, tempfile
from distrs.rewards import cxx_pch
from distrs.rewards.judge.settings import JudgeSettings
s = JudgeSettings()
use = cxx_pch.for_judge(s, cxx_pch.BWRAP)
src = use.mounts.binds[0][0] if use else None
used = False
if src:
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "p.cpp"), "w").write(cxx_pch.PROBE)
        r = subprocess.run([s.cxx, *s.cxx_flags, "-Winvalid-pch", "-H", "-I", src, "-c", "-o", os.devnull,
                            "p.cpp"], cwd=d, capture_output=True, text=True)
        used = r.returncode == 0 and cxx_pch.pch_used(r.stderr, src)
print(json.dumps({"dir": src, "used": used}))
"""
PY_OK = "a, b = map(int, input().split())\nprint(a + b)\n"


def judge(s: System, items: list[tuple[str, dict[str, Any]]], wait_s: float = 180) -> list[dict[str, Any]]:
    """Submit one batch through the proxy as a trainer and wait for every result, in order."""
    with httpx.Client(base_url=s.proxy_url, headers=auth_header(s.trainer_token), timeout=60) as c:
        batch, body = submit_and_wait(c, "pods", items, wait_s)
    assert body.get("complete"), f"batch incomplete: {body}\n" + "\n".join(
        f"--- {n}\n{s.logs(n)[-3000:]}" for n in s.workers.values()
    )
    order = {r["request_id"]: r for r in body["results"]}
    return [order[f"{batch}-{i}"] for i in range(len(items))]


def test_release_starts_from_the_rendered_chart(pod_system: Callable[..., System]) -> None:
    s = pod_system(VALUES)
    assert {"compile", "run", "verify", "execute"} <= set(s.workers)
    for name in [*s.workers.values(), s.name_of("proxy"), s.name_of("redis"), s.name_of("planner")]:
        assert s.ready(name), f"{name} not ready:\n{s.logs(name)[-3000:]}"
    # The proxy stores in the chart's Redis (through the Service name) and knows the workers' token.
    r = httpx.get(f"{s.proxy_url}/v1/stats", headers=auth_header(s.admin_token), timeout=30)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{s.proxy_url}/v1/stats", timeout=30).status_code == 401
    # Each container runs as the chart says: uid 10001, read-only root.
    worker = s.workers["compile"]
    assert "10001" in s._podman("exec", worker, "id", "-u").stdout
    assert s._podman("exec", worker, "touch", "/opt/distrs/x", check=False).returncode != 0


def test_judged_submissions_score_one(pod_system: Callable[..., System]) -> None:
    s = pod_system(VALUES)
    results = judge(
        s,
        [
            ("python", {"code": PY_OK, "tests": ADD}),
            ("cpp", {"code": CPP_OK, "tests": ADD}),
            ("math", {"completion": "so the answer is \\boxed{4}", "ground_truth": "4"}),
            ("python", {"code": "print(7)\n", "tests": ADD}),
            ("cpp", {"code": CPP_STDCXX, "tests": ADD}),
        ],
    )
    assert [(r["status"], r["score"]) for r in results[:3]] == [("ok", 1.0)] * 3, results
    assert results[3]["status"] == "wrong_answer" and results[3]["score"] == 0.0, results[3]
    # The cpp request passed through both CPU stages, each on its own worker container.
    assert [st["name"] for st in results[1]["stages"]] == ["compile", "run"]
    assert results[1]["stages"][0]["worker"] != results[1]["stages"][1]["worker"]
    assert (results[4]["status"], results[4]["score"]) == ("ok", 1.0), results[4]
    # The worker image carries bits/stdc++.h precompiled at build for the judge's compiler and
    # flags: the compile worker's jails get that one (nothing made at start), and it is used.
    probe = s._podman("exec", s.workers["compile"], "python", "-c", PCH_PROBE, timeout=300)
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["dir"] and seen["dir"].startswith("/usr/local/lib/distrs/pch/"), (seen, probe.stderr)
    assert seen["used"], (seen, probe.stderr)


def test_trace_replays_with_every_batch_complete(pod_system: Callable[..., System], tmp_path: Path) -> None:
    from distrs.replay.run import replay_async
    from tests.e2e.test_up_replay import write_trace

    s = pod_system(VALUES)
    trace = write_trace(tmp_path, tasks=2, iterations=2, batch=6)
    _, reports, _ = asyncio.run(replay_async(s.proxy_url, trace, 1.0, token=s.trainer_token))
    assert len(reports) == 4
    for b in reports:
        assert sum(b.statuses.values()) == b.size == 6, b
        assert b.statuses == {"ok": 3, "compile_error": 3}, b
        assert b.extra_delay_s is not None
    # The planner read the same store and acted through its Kubernetes actuator, configured
    # in-cluster (service-account token + CA) against the API stand-in.
    seen = {(c.verb, c.resource) for c in s.kube.calls}
    assert any(r.startswith("deployments") for _, r in seen), (seen, s.logs(s.name_of("planner"))[-3000:])
    assert not s.kube.invalid, s.kube.invalid


def test_gpu_worker_without_a_gpu_reports_itself_unready_for_cuda(pod_system: Callable[..., System]) -> None:
    values = {**VALUES, "workers": {**VALUES["workers"], "stages": {"run": {"enabled": False}}}}
    s = pod_system(values, wait_workers=False)
    name = s.workers["execute"]  # serves every type using execute: cuda and synthetic
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "not ready" not in s.logs(name):
        time.sleep(1)
    log = s.logs(name)
    assert "not ready" in log and "cuda" in log, log[-3000:]
    assert s.running(name) and not s.ready(name)


def test_runtime_class_the_harness_cannot_emulate_is_a_clear_error(pod_system: Callable[..., System]) -> None:
    with pytest.raises(Unsupported, match="runtimeClassName 'gvisor'"):
        pod_system({**VALUES, "workers": {**VALUES["workers"], "defaults": {"runtimeClassName": "gvisor"}}})
