"""One-machine mode: proxy, planner and local worker processes in one command.

``serve`` runs uvicorn and the planner on one event loop sharing one store (the memory store
only works this way), with a ``LocalActuator`` for the workers. Signals are handled here, not by
uvicorn, so Ctrl-C / SIGTERM drain the workers before the proxy stops and no lease is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from distrs.actuators.local import LocalActuator
from distrs.config import PlannerSettings, ProxySettings
from distrs.core.pipeline_config import load_pipelines
from distrs.core.stages import PipelineTable, ResourceClass
from distrs.planner.loop import Planner
from distrs.proxy.app import create_app
from distrs.proxy.deps import AppState
from distrs.proxy.server import uvicorn_config
from distrs.rewards.registry import registered

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # signals are ours (see module docstring)
        yield


def ready_reward_types(table: PipelineTable) -> dict[str, list[str]]:
    """Per stage, the reward types whose handler can run on this machine (e.g. no cuda without GPU)."""
    known = registered(table)
    out: dict[str, list[str]] = {}
    for stage in table.stages:
        types = []
        for t, rt in table.reward_types.items():
            if stage in rt.stages and (t, stage) in known:
                try:
                    ok, _ = known[(t, stage)]().ready()
                except Exception:
                    ok = False
                if ok:
                    types.append(t)
        out[stage] = types
    return out


def local_cpu_cap() -> int:
    """Workers per CPU stage on this machine: the cores this process may use.

    A CPU stage's workers each keep a core busy (a verifier, a compiler, a sandboxed program), so
    more of them than cores only adds switching and memory; on a 2-core machine 32 workers per
    stage ran short rewards at a fraction of the speed of 2.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def stage_caps(table: PipelineTable, cpu_cap: int | None) -> dict[str, int]:
    """The per-stage worker bound: ``cpu_cap`` for CPU stages, none for GPU stages."""
    if cpu_cap is None:
        return {}
    return {name: cpu_cap for name, spec in table.stages.items() if spec.resource is ResourceClass.CPU}


@dataclass
class Running:
    url: str
    state: AppState
    planner: Planner
    actuator: LocalActuator
    token: str | None


@contextlib.asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    redis_url: str | None = None,
    insecure: bool = False,
    redis_mode: str | None = None,
    pipelines_file: str | None = None,
    policy: str = "distrs",
    max_workers: int = 8,
    planner_overrides: dict[str, Any] | None = None,
    worker_log_dir: str | None = None,
    cpu_stage_cap: int | None = None,
    gpu_health_port: int | None = None,
    gpu_stage_cap: int | None = None,
) -> AsyncIterator[Running]:
    """Run the whole service here. ``max_workers`` bounds every stage's pool; ``cpu_stage_cap``
    (``distrs up``: the cores available) bounds CPU stages further; the planner decides each
    stage's count and the actuator keeps it within both."""
    worker_token = None if insecure else secrets.token_urlsafe(24)
    base = ProxySettings()
    tokens = ",".join(filter(None, [base.tokens, f"{worker_token}:worker" if worker_token else None]))
    settings = base.model_copy(
        update=dict(
            host=host,
            port=port,
            insecure=insecure,
            tokens=tokens or None,
            redis_url=redis_url or base.redis_url,
            redis_mode=redis_mode or base.redis_mode,
            pipelines_file=pipelines_file or base.pipelines_file,
        )
    )
    table = load_pipelines(settings.pipelines_file)
    app = create_app(settings, table=table)
    state: AppState = app.state.distrs
    server = _Server(uvicorn_config(app, settings, log_level="warning", timeout_graceful_shutdown=5))
    server_task = asyncio.create_task(server.serve())
    while not server.started:
        if server_task.done():
            server_task.result()
            raise RuntimeError("proxy failed to start")
        await asyncio.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://{host}:{bound}"
    ready = ready_reward_types(table)
    extra = {s: ["--reward-types", ",".join(ts)] for s, ts in ready.items() if ts}
    if gpu_health_port is not None:  # each GPU stage's host serves /readyz and /metrics
        gpu_stages = sorted(n for n, spec in table.stages.items() if spec.resource is ResourceClass.GPU)
        for i, stage in enumerate(gpu_stages):
            extra.setdefault(stage, []).extend(["--health-port", str(gpu_health_port + i)])
    env = {"DISTRS_PIPELINES_FILE": settings.pipelines_file} if settings.pipelines_file else {}
    caps = stage_caps(table, cpu_stage_cap)
    if gpu_stage_cap is not None:  # e.g. one worker per GPU stage on a one-GPU machine
        caps.update(
            {n: gpu_stage_cap for n, spec in table.stages.items() if spec.resource is ResourceClass.GPU}
        )
    actuator = LocalActuator(
        proxy_url=url,
        token=worker_token,
        extra_args=extra,
        env=env,
        max_per_stage=max_workers,
        log_dir=worker_log_dir,
        stage_caps=caps,
    )
    psettings = PlannerSettings(
        policy=policy,
        max_replicas=max_workers,
        redis_url=settings.redis_url,
        redis_mode=settings.redis_mode,
        **(planner_overrides or {}),
    )
    servable = {s for s, ts in ready.items() if ts}
    planner = Planner(
        state.store,
        _OnlyStages(actuator, servable),
        table,
        psettings,
        metrics=state.metrics,
    )
    if caps:  # the planner plans within the caps (its search never counts on more workers)
        inner = planner.plan_fn
        planner.plan_fn = lambda ctx: inner(dataclasses.replace(ctx, stage_max_replicas=caps))
    state.plan_view = planner.view
    stop = asyncio.Event()
    planner_task = asyncio.create_task(planner.run(stop))
    try:
        yield Running(url=url, state=state, planner=planner, actuator=actuator, token=worker_token)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(planner_task, 10)
        await actuator.close()
        server.should_exit = True
        await server_task


class _OnlyStages:
    """Ignore scaling requests for stages no local worker can serve (nothing to start there)."""

    def __init__(self, inner: LocalActuator, stages: set[str]) -> None:
        self.inner, self.stages = inner, stages

    async def set_replicas(self, stage: str, n: int) -> None:
        if stage in self.stages:
            await self.inner.set_replicas(stage, n)

    async def observe(self) -> Any:
        return await self.inner.observe()

    async def close(self) -> None:
        await self.inner.close()


def run_up(**kwargs: Any) -> None:
    """``distrs up``: ``serve`` until SIGINT/SIGTERM, CPU stages capped at the cores available."""
    kwargs.setdefault("cpu_stage_cap", local_cpu_cap())

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with serve(**kwargs) as running:
            print(f"DistRS is up at {running.url}  (docs: {running.url}/docs, stats: {running.url}/v1/stats)")
            print("Ctrl-C drains the workers and stops.")
            await stop.wait()
            print("draining workers...")

    asyncio.run(main())
