"""Local actuator: the worker pool of one machine, one worker-host process per stage.

Each stage gets a ``distrs worker --control-stdin`` process that runs its workers as threads
(see ``distrs.worker.host``); ``set_replicas`` writes the new count to its stdin. Scaling is
therefore as fast as starting a thread, and scale-down drains: a busy worker finishes its lease
before its thread ends, so no running request is killed. Used by ``distrs up``; on Kubernetes
the kubernetes actuator does the same job through Deployments.

``ready`` is the count last asked for while the host runs (threads start at once); workers
still finishing a lease after a scale-down are not counted.

Hosts run in sessions of their own (a Ctrl-C at the terminal reaches only the service, which
drains them), so nothing of the terminal ends them with the service. Each holds instead the read
end of a lifeline pipe whose write end only this process keeps: when this process ends, however
it ends (SIGKILL included, during a drain included), the kernel closes the write end and the host
ends at once with every process it started (``distrs/worker/lifeline.py`` says why a pipe). A
drain that runs out of time closes the lifeline the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

from distrs.actuators.base import StageReplicas

log = logging.getLogger(__name__)


@dataclass
class _Host:
    popen: subprocess.Popen[bytes]
    lifeline: int | None  # the write end of the host's lifeline (None once closed)
    desired: int = 0

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def cut_lifeline(self) -> None:
        """Close the lifeline: the host ends at once with everything it started."""
        if self.lifeline is not None:
            with contextlib.suppress(OSError):
                os.close(self.lifeline)
            self.lifeline = None


def _lifeline() -> tuple[int, int]:
    """A pipe (read end, write end), both close-on-exec, the read end above stdio (it is passed
    under its own number, which must not be one of the child's 0-2)."""
    r, w = os.pipe()
    if r < 3:
        high = fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(r)
        r = high
    return r, w


@dataclass
class LocalActuator:
    """Worker hosts per stage. ``extra_args[stage]`` are appended to that stage's command line."""

    proxy_url: str
    token: str | None = None
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    max_per_stage: int = 64
    log_dir: str | None = None
    # Tighter bounds for some stages (``distrs up``: CPU stages near the cores available).
    stage_caps: dict[str, int] = field(default_factory=dict)
    _hosts: dict[str, _Host] = field(default_factory=dict)
    _desired: dict[str, int] = field(default_factory=dict)
    _errors: dict[str, str] = field(default_factory=dict)

    def _command(self, stage: str, lifeline_fd: int) -> list[str]:
        cmd = [sys.executable, "-m", "distrs.cli", "worker", "--stage", stage, "--proxy", self.proxy_url]
        cmd += ["--control-stdin", "--lifeline-fd", str(lifeline_fd)]
        return [*cmd, "--log-level", "warning", *self.extra_args.get(stage, [])]

    def _spawn(self, stage: str) -> _Host:
        env = {**os.environ, **self.env}
        if self.token:
            env["DISTRS_TOKEN"] = self.token
        out: Any = subprocess.DEVNULL
        if self.log_dir:
            os.makedirs(self.log_dir, exist_ok=True)
            out = open(os.path.join(self.log_dir, f"worker-{stage}-{time.time_ns()}.log"), "ab")  # noqa: SIM115
        r, w = _lifeline()
        try:
            p = subprocess.Popen(
                self._command(stage, r),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=out,
                start_new_session=True,
                pass_fds=(r,),
            )
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
            if out is not subprocess.DEVNULL:
                out.close()
        return _Host(popen=p, lifeline=w)

    async def set_replicas(self, stage: str, n: int) -> None:
        n = max(0, min(n, self.max_per_stage, self.stage_caps.get(stage, self.max_per_stage)))
        self._desired[stage] = n
        host = self._hosts.get(stage)
        if host is not None and not host.alive:
            log.warning("worker host for %s exited with %s; starting a new one", stage, host.popen.returncode)
            self._errors[stage] = f"worker host exited with {host.popen.returncode}"
            host.cut_lifeline()
            host = None
        if host is None:
            if n == 0:
                return
            host = self._hosts[stage] = self._spawn(stage)
        if host.desired == n:
            return
        stdin: IO[bytes] | None = host.popen.stdin
        try:
            assert stdin is not None
            stdin.write(f"{n}\n".encode())
            stdin.flush()
            host.desired = n
            self._errors.pop(stage, None)
        except (BrokenPipeError, OSError) as exc:
            self._errors[stage] = f"worker host unreachable: {exc}"
            log.warning("could not resize %s workers: %s", stage, exc)

    async def observe(self) -> dict[str, StageReplicas]:
        out: dict[str, StageReplicas] = {}
        for stage in set(self._desired) | set(self._hosts):
            host = self._hosts.get(stage)
            ready = host.desired if host is not None and host.alive else 0
            out[stage] = StageReplicas(
                desired=self._desired.get(stage, 0), ready=ready, error=self._errors.get(stage)
            )
        return out

    def total_processes(self) -> int:
        return sum(1 for h in self._hosts.values() if h.alive)

    def pids(self) -> list[int]:
        return [h.popen.pid for h in self._hosts.values()]

    async def close(self, timeout_s: float = 30.0, kill_wait_s: float = 10.0) -> None:
        """Drain every worker (close the hosts' stdin) and wait up to ``timeout_s``; then cut the
        lifeline of each host still running (it ends with everything it started) and, should one
        outlive that by ``kill_wait_s``, kill its process group."""
        for host in self._hosts.values():
            with contextlib.suppress(OSError):
                if host.popen.stdin:
                    host.popen.stdin.close()
        deadline = time.monotonic() + timeout_s
        for host in self._hosts.values():
            try:  # in a thread: draining workers report to a proxy that may share this event loop
                await asyncio.to_thread(host.popen.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker host %d did not drain in time; ending it", host.popen.pid)
                host.cut_lifeline()
                try:
                    await asyncio.to_thread(host.popen.wait, kill_wait_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(host.popen.pid, signal.SIGKILL)
                    host.popen.wait(5)
            host.cut_lifeline()
        self._hosts.clear()
