"""A drain that runs out of time ends the busy worker host with every process it started.

``LocalActuator.close`` drains; a worker busy past ``timeout_s`` is then ended by cutting its
host's lifeline, and the host takes what it started down with it. The sandbox here is the
degraded ``rlimits`` backend: no PID namespace ends the program with its jail, nothing sends it
a parent-death signal, and the program and the child it forks run in sessions of their own, so
neither a kill of the host's process group nor the host's death reaches them; only the host's
tree kill does."""

from __future__ import annotations

import shutil
import uuid

import pytest

from distrs.actuators.local import LocalActuator
from tests.fixtures import processes
from tests.fixtures.service import WORKER, running_service
from tests.requirements import need

DEGRADED = {"DISTRS_WAIT_S": "1", "DISTRS_SANDBOX_BACKEND": "rlimits", "DISTRS_SANDBOX_ALLOW_DEGRADED": "1"}


def sleeper(marker: str) -> str:
    """Renames itself ``marker``, forks a child that leaves for a new session, and both sleep."""
    return (
        "#include <sys/prctl.h>\n#include <unistd.h>\n"
        f'int main() {{ prctl(PR_SET_NAME, "{marker}"); if (fork() == 0) setsid(); sleep(300); }}\n'
    )


@pytest.mark.timeout(120)
async def test_close_past_its_timeout_ends_the_host_and_what_it_started() -> None:
    need("g++", "the cpp request compiles with it; make system-deps installs it", found=shutil.which("g++"))
    marker = f"orph{uuid.uuid4().hex[:8]}"
    with running_service(workers={}) as svc:
        only_cpp = {stage: ["--reward-types", "cpp"] for stage in ("compile", "run")}
        act = LocalActuator(proxy_url=svc.url, token=WORKER, env=DEGRADED, extra_args=only_cpp)
        procs: list[processes.Proc] = []
        try:
            await act.set_replicas("compile", 1)
            await act.set_replicas("run", 1)
            c = svc.client()
            c.post("/v1/batches", json={"task": "t", "batch_id": "b", "size": 1})
            payload = {
                "code": sleeper(marker),
                "tests": [{"stdin": "", "expected_stdout": ""}],
                "time_limit_s": 60,
            }
            body = {"task": "t", "batch_id": "b", "request_id": "r", "reward_type": "cpp", "payload": payload}
            assert c.post("/v1/requests", json=body).json()["accepted"] == 1
            processes.wait_until(
                lambda: len(processes.named(marker)) == 2, 60, "the program and its child running"
            )
            hosts = set(act.pids())
            procs = [p for p in processes.every() if p.pid in hosts]
            procs += [p for h in hosts for p in processes.tree(h)]
            assert len([p for p in procs if p.name == marker]) == 2  # both descend from a host
            await act.close(timeout_s=1)
            processes.wait_until(
                lambda: not processes.alive(procs) and not processes.named(marker),
                30,
                "hosts and programs gone",
            )
        finally:
            processes.kill_all([*procs, *processes.named(marker)])
            await act.close(timeout_s=1)
