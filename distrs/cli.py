"""The ``distrs`` command line: one entry point for every process and tool.

Process commands (``up``, ``proxy``, ``worker``, ``planner``) build typed settings once (flags over
``DISTRS_*`` environment variables) and pass them down; tool groups (``bench``, ``trace``,
``placement``) live in ``distrs.commands``.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Annotated, Any

import typer


def _redis_mode(value: str | None) -> str | None:
    """``--redis-mode``: standalone | cluster | sentinel (checked here; the settings type is RedisMode)."""
    if value is not None and value not in ("standalone", "cluster", "sentinel"):
        raise typer.BadParameter(
            f"{value!r} is not one of standalone, cluster, sentinel", param_hint="--redis-mode"
        )
    return value


# ``--redis-mode`` as distrs up, proxy and planner take it.
RedisModeOption = Annotated[
    str | None,
    typer.Option(
        "--redis-mode",
        callback=_redis_mode,
        help="standalone | cluster: Redis Cluster, --redis naming any seed node | sentinel: the primary "
        "Sentinels name, --redis redis+sentinel://[:password@]host:26379[,host:26379...]/MASTER "
        "(default: DISTRS_REDIS_MODE, else standalone).",
    ),
]

app = typer.Typer(add_completion=False, no_args_is_help=True, help="DistRS: elastic reward service for RLVR.")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


LogLevel = Annotated[str, typer.Option("--log-level", help="debug | info | warning | error")]


@app.command()
def up(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 = any free port).")] = 8000,
    redis: Annotated[
        str | None, typer.Option("--redis", help="Redis URL; default: in-process memory store.")
    ] = None,
    redis_mode: RedisModeOption = None,
    insecure: Annotated[bool, typer.Option(help="No tokens needed (local demos only).")] = False,
    config: Annotated[
        str | None, typer.Option("--config", help="Pipeline YAML (stages, reward types).")
    ] = None,
    policy: Annotated[str, typer.Option(help="Scaling policy: distrs | history | static.")] = "distrs",
    max_workers: Annotated[int, typer.Option(help="Most local workers per stage.")] = 32,
    gpu_health_port: Annotated[
        int | None,
        typer.Option(help="Serve the GPU stages' /readyz and /metrics from this port on (one per stage)."),
    ] = None,
    gpu_workers: Annotated[
        int | None, typer.Option(help="Most local workers per GPU stage (default: --max-workers).")
    ] = None,
    worker_log_dir: Annotated[
        str | None, typer.Option(help="Write each worker host's log into this folder.")
    ] = None,
    log_level: LogLevel = "info",
) -> None:
    """Run proxy, planner and local workers on this machine; Ctrl-C drains and stops."""
    from distrs.local_service import run_up

    _setup_logging(log_level)
    run_up(
        host=host,
        port=port,
        redis_url=redis,
        redis_mode=redis_mode,
        insecure=insecure,
        pipelines_file=config,
        policy=policy,
        max_workers=max_workers,
        gpu_health_port=gpu_health_port,
        gpu_stage_cap=gpu_workers,
        worker_log_dir=worker_log_dir,
    )


@app.command()
def proxy(
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    redis: Annotated[
        str | None, typer.Option("--redis", help="Redis URL (default: DISTRS_REDIS_URL).")
    ] = None,
    redis_mode: RedisModeOption = None,
    insecure: Annotated[bool, typer.Option(help="No tokens needed (local demos only).")] = False,
    config: Annotated[str | None, typer.Option("--config", help="Pipeline YAML.")] = None,
    log_level: LogLevel = "info",
) -> None:
    """Run the HTTP proxy alone (production: several replicas over one Redis)."""
    import uvicorn

    from distrs.config import ProxySettings
    from distrs.proxy.app import create_app
    from distrs.proxy.server import uvicorn_config

    _setup_logging(log_level)
    overrides: dict[str, Any] = {
        k: v
        for k, v in dict(
            host=host, port=port, redis_url=redis, redis_mode=redis_mode, pipelines_file=config
        ).items()
        if v
    }
    if insecure:
        overrides["insecure"] = True
    settings = ProxySettings(**overrides)
    server_config = uvicorn_config(
        create_app(settings), settings, log_level=log_level.lower(), timeout_graceful_shutdown=10
    )
    uvicorn.Server(server_config).run()


@app.command()
def worker(
    stage: Annotated[str | None, typer.Option(help="Stage to serve.")] = None,
    proxy: Annotated[str | None, typer.Option("--proxy", help="Proxy URL.")] = None,
    reward_types: Annotated[str | None, typer.Option(help="Comma-separated reward types to serve.")] = None,
    health_port: Annotated[int | None, typer.Option(help="Serve /healthz and /readyz on this port.")] = None,
    once: Annotated[bool, typer.Option(help="Handle at most one lease, then exit.")] = False,
    threads: Annotated[int, typer.Option(help="Run this many workers in this process (threads).")] = 1,
    control_stdin: Annotated[
        bool, typer.Option(help="Read the number of workers from stdin, one per line (local actuator).")
    ] = False,
    lifeline_fd: Annotated[
        int | None,
        typer.Option(
            help="End at once, with every process this worker started, when this descriptor reads "
            "end of file (local actuator: the write end is held by the process that started it)."
        ),
    ] = None,
    log_level: LogLevel = "info",
) -> None:
    """Run one stage worker: pull leases, run the handler, report; SIGTERM drains."""
    from distrs.worker.isolation import enter

    handed_token = enter()  # first, before any thread: may re-execute this process (same pid)
    if lifeline_fd is not None:  # next: from here on, whatever runs ends with the parent
        from distrs.worker.lifeline import end_tree, watch

        try:
            watch(lifeline_fd, end_tree)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--lifeline-fd") from e

    from distrs.config import WorkerSettings
    from distrs.core.pipeline_config import load_pipelines
    from distrs.worker.health import serve_health
    from distrs.worker.loop import Worker
    from distrs.worker.proxy_client import HttpProxyClient

    _setup_logging(log_level)
    overrides: dict[str, Any] = {
        k: v
        for k, v in dict(
            stage=stage, proxy_url=proxy, reward_types=reward_types, health_port=health_port
        ).items()
        if v is not None
    }
    s = WorkerSettings(**overrides)
    token = handed_token or s.read_token()
    types = [t.strip() for t in s.reward_types.split(",")] if s.reward_types else None
    table = load_pipelines(s.pipelines_file)

    gpu, metrics = _gpu_guard(s, table)

    def make(worker_id: str | None) -> Worker:
        return Worker(
            s.stage,
            HttpProxyClient(s.proxy_url, token),
            table,
            worker_id=worker_id,
            reward_types=types,
            wait_s=min(s.wait_s, 5.0),
            heartbeat_s=s.heartbeat_s,
            max_bundle=s.max_bundle,
            bundle_target_s=s.bundle_target_s,
            gpu=gpu,
            metrics=metrics,
            execution_log=s.execution_log,
        )

    if threads > 1 or control_stdin:
        from distrs.worker.host import run_host

        prefix = s.worker_id
        port, registry = s.health_port, metrics.registry if metrics else None
        run_host(
            lambda wid: make(f"{prefix}-{wid}" if prefix else wid),
            threads if not control_stdin else 0,
            sys.stdin if control_stdin else None,
            on_start=None if port is None else lambda h: serve_health(port, h.readiness, registry=registry),
        )
        return
    w = make(s.worker_id)
    signal.signal(signal.SIGTERM, lambda *_: w.request_drain())
    signal.signal(signal.SIGINT, lambda *_: w.request_drain())
    if s.health_port is not None:
        serve_health(s.health_port, w.readiness, registry=metrics.registry if metrics else None)
    if once:
        w.run_once()
        return
    w.run()


def _gpu_guard(s: Any, table: Any, dev: str = "/dev") -> tuple[Any, Any]:
    """The GPU health guard and worker metrics of a GPU stage's worker on a machine with a GPU
    device node; (None, None) elsewhere (CPU stages, GPU stages run without a GPU for tests)."""
    from distrs.core.stages import ResourceClass
    from distrs.rewards.cuda import gpu_devices
    from distrs.rewards.gpu_env import gpu_sharing

    spec = table.stages.get(s.stage)
    if spec is None or spec.resource is not ResourceClass.GPU or not gpu_devices(dev) or not s.gpu_health:
        return None, None
    from distrs.metrics import WorkerMetrics
    from distrs.worker.gpu_health import GpuGuard, HealthLimits, SubprocessProbe
    from distrs.worker.nvml import PyNvml, select_gpu

    nvml, selector = PyNvml(), select_gpu()
    metrics = WorkerMetrics(gpu_read=lambda: [nvml.read(selector, consume_xids=False)])

    def record(ev: Any) -> None:
        metrics.gpu_health_checks.labels(ev.trigger, "healthy" if ev.ok else "sick").inc()
        metrics.gpu_healthy.set(1 if ev.ok else 0)

    # On a time-sliced GPU other pods' processes are expected: only the other rules apply there.
    other_mb = s.gpu_other_memory_mb if gpu_sharing() != "time-sliced" else 1 << 40
    limits = HealthLimits(other_mb << 20, s.gpu_probe_timeout_s, s.gpu_recheck_s)
    return GpuGuard(nvml, SubprocessProbe(), selector, limits, on_check=record), metrics


@app.command()
def planner(
    redis: Annotated[
        str | None, typer.Option("--redis", help="Redis URL (default: DISTRS_REDIS_URL).")
    ] = None,
    redis_mode: RedisModeOption = None,
    policy: Annotated[str | None, typer.Option(help="distrs | history | static")] = None,
    actuator: Annotated[str | None, typer.Option(help="local | kubernetes")] = None,
    proxy: Annotated[str | None, typer.Option("--proxy", help="Proxy URL for local workers.")] = None,
    config: Annotated[str | None, typer.Option("--config", help="Pipeline YAML.")] = None,
    log_level: LogLevel = "info",
) -> None:
    """Run the scaling planner against a shared Redis store."""
    from distrs.planner.process import run_planner

    _setup_logging(log_level)
    run_planner(
        redis_url=redis,
        redis_mode=redis_mode,
        policy=policy,
        actuator=actuator,
        proxy_url=proxy,
        pipelines_file=config,
    )


@app.command()
def replay(
    trace: Annotated[
        str | None, typer.Option(help="distrs-trace/1 file (.csv.gz); default: the shipped demo slice.")
    ] = None,
    url: Annotated[str, typer.Option(help="Service URL.")] = "http://127.0.0.1:8000",
    speedup: Annotated[float, typer.Option(help="Divide every trace time and duration by this.")] = 20.0,
    token: Annotated[str | None, typer.Option(help="Trainer token.", envvar="DISTRS_TOKEN")] = None,
    tasks: Annotated[int | None, typer.Option(help="Replay only the first N tasks.")] = None,
    iterations: Annotated[
        int | None, typer.Option(help="Replay only the first N iterations per task.")
    ] = None,
    batch: Annotated[int | None, typer.Option(help="Keep only the first N requests of each batch.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the per-batch report here.")] = None,
) -> None:
    """Drive a running service as trainers would, from a trace; print extra delay and worker-seconds."""
    from distrs.replay.run import replay_main

    replay_main(
        trace=trace,
        url=url,
        speedup=speedup,
        token=token,
        tasks=tasks,
        iterations=iterations,
        batch=batch,
        json_out=json_out,
    )


@app.command()
def demo(
    speedup: Annotated[float, typer.Option(help="Time compression of the shipped trace slice.")] = 20.0,
    max_workers: Annotated[int, typer.Option(help="Most local workers per stage.")] = 64,
) -> None:
    """Bring the embedded service up, replay a short multi-tenant slice, print the table, stop."""
    from distrs.replay.demo import demo_main

    _setup_logging("warning")
    sys.exit(demo_main(speedup=speedup, max_workers=max_workers))


def _mount_groups() -> None:
    from distrs.commands import bench, config, placement, trace

    app.add_typer(config.app, name="config", help="Configuration: docs.")
    app.add_typer(bench.app, name="bench", help="Benchmarks: scaling, ebf, planner-runtime.")
    app.add_typer(trace.app, name="trace", help="Workload traces: generate.")
    app.add_typer(placement.app, name="placement", help="Trainer placement: plan, render.")


_mount_groups()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
