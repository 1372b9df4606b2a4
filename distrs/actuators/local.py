"""Local actuator: one OS process per worker, started and drained on this machine.

Scale-up spawns ``distrs worker --stage S`` processes; scale-down sends SIGTERM, which makes a
worker finish its current lease and exit (graceful drain), so no running request is killed. A
draining process no longer counts as ready but is reaped only once it has exited. Used by
``distrs up``; on Kubernetes the kubernetes actuator does the same job through Deployments.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from distrs.actuators.base import StageReplicas

log = logging.getLogger(__name__)


@dataclass
class _Proc:
    popen: subprocess.Popen[bytes]
    started: float
    draining: bool = False


@dataclass
class LocalActuator:
    """Process pool per stage. ``extra_args[stage]`` are appended to that stage's command line."""

    proxy_url: str
    token: str | None = None
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    max_per_stage: int = 64
    log_dir: str | None = None
    _procs: dict[str, list[_Proc]] = field(default_factory=dict)
    _desired: dict[str, int] = field(default_factory=dict)

    def _command(self, stage: str) -> list[str]:
        cmd = [sys.executable, "-m", "distrs.cli", "worker", "--stage", stage, "--proxy", self.proxy_url]
        return cmd + self.extra_args.get(stage, [])

    def _spawn(self, stage: str) -> _Proc:
        env = {**os.environ, **self.env}
        if self.token:
            env["DISTRS_TOKEN"] = self.token
        out: Any = subprocess.DEVNULL
        if self.log_dir:
            os.makedirs(self.log_dir, exist_ok=True)
            out = open(os.path.join(self.log_dir, f"worker-{stage}-{time.time_ns()}.log"), "ab")  # noqa: SIM115
        p = subprocess.Popen(
            self._command(stage), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        return _Proc(popen=p, started=time.monotonic())

    def _reap(self, stage: str) -> None:
        self._procs[stage] = [p for p in self._procs.get(stage, []) if p.popen.poll() is None]

    async def set_replicas(self, stage: str, n: int) -> None:
        n = max(0, min(n, self.max_per_stage))
        self._desired[stage] = n
        self._reap(stage)
        live = [p for p in self._procs.get(stage, []) if not p.draining]
        if len(live) < n:
            for _ in range(n - len(live)):
                self._procs.setdefault(stage, []).append(self._spawn(stage))
        elif len(live) > n:
            # Newest first: older workers are more likely warm; busy ones finish their lease anyway.
            for p in sorted(live, key=lambda q: q.started, reverse=True)[: len(live) - n]:
                p.draining = True
                with contextlib.suppress(ProcessLookupError):
                    p.popen.send_signal(signal.SIGTERM)

    async def observe(self) -> dict[str, StageReplicas]:
        out: dict[str, StageReplicas] = {}
        for stage in set(self._desired) | set(self._procs):
            self._reap(stage)
            ready = sum(1 for p in self._procs.get(stage, []) if not p.draining)
            out[stage] = StageReplicas(desired=self._desired.get(stage, 0), ready=ready)
        return out

    def total_processes(self) -> int:
        return sum(len(v) for v in self._procs.values())

    async def close(self, timeout_s: float = 30.0) -> None:
        """Drain every worker (SIGTERM), wait up to ``timeout_s``, then kill what is left."""
        for stage in list(self._procs):
            await self.set_replicas(stage, 0)
        deadline = time.monotonic() + timeout_s
        for procs in self._procs.values():
            for p in procs:
                left = max(0.1, deadline - time.monotonic())
                try:
                    p.popen.wait(left)
                except subprocess.TimeoutExpired:
                    log.warning("worker %d did not drain in time; killing it", p.popen.pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.popen.pid, signal.SIGKILL)
                    p.popen.wait(5)
        self._procs.clear()
