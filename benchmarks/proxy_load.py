"""Proxy load benchmark: throughput against the framework's own limit, added latency, memory.

One ``distrs proxy`` process (uvicorn, one event loop) with the memory store, then one over a real
``redis-server`` (AOF on, ``appendfsync everysec`` as recommended for production in
docs/store.md), side by side in one run:

0. **Framework limit** — a minimal app on the same server stack (``floor_app``: FastAPI routes at
   the worker paths parsing their JSON bodies, served by the proxy's uvicorn configuration)
   driven by the same worker loops, before and after the proxy runs: HTTP calls per second.
   Divided by the HTTP calls one lifecycle takes through the proxy (counted), it is the
   lifecycles/s the framework alone would allow. Targets: the proxy >= 70 % of it with the
   memory store, >= 55 % with Redis.
1. **Throughput** — request lifecycles per second with 64 concurrent workers. A lifecycle is the
   whole trip: register, bulk submit, lease, complete, and the result fetched by the trainer
   (batches of ``--batch-size`` registered and submitted in bulk while earlier ones are being
   worked on, results read with the long-poll). Target: >= 2,000/s per proxy process. Proxy CPU
   and (Redis) the Redis server's CPU seconds and commands per lifecycle (``INFO CPU``, ``INFO
   stats`` before and after).
   Run twice: one lease and one completion call per request (64 workers), and as ``distrs
   worker`` runs a short stage, bundles of up to ``--bundle`` leases per call (8 workers); the
   framework-limit share is stated for the first only (a bundle call carries k leases).
2. **Latency at a fixed rate** — single-request submits at ``--rate`` req/s (open loop) with the 64
   workers waiting on long-polls. Reported per call: submit and complete round trips, and the
   dispatch latency (submit sent -> a waiting worker holds the lease). On loopback the round
   trip is the time the proxy (and its store calls) adds. Targets: p50 <= 2 ms, p99 <= 20 ms.
2b. **Batches of one** — per-sample reward functions send each rollout as its own batch:
   register, submit, lease, complete and result, five calls per lifecycle. Capacity with 64
   trainers each running that sequence in a loop (closed loop), then the lifecycle's round trip
   at half that rate (open loop). Target: p99 <= 10 ms added with the memory store: the same
   five round trips made to the framework-floor app at the same rate, on the same machine, take
   time too (the load generator and the server stack share the cores with everything else), so
   the added p99 is the proxy's lifecycle p99 less the floor's five-call p99; both are reported.
3. **Memory** — a freshly started proxy's (Redis) RSS after 100k requests are queued (no workers),
   plus Redis' memory per queued request (docs/store.md sizing). Target: proxy RSS <= 300 MB.

The workers and trainer are simulated in this process with a small keep-alive HTTP/1.1 client on
asyncio streams (hand-written: no extra dependency, and far less client CPU per call than a
general client, so that on a small machine the proxy rather than the load generator is measured).

    .venv/bin/python benchmarks/proxy_load.py            # writes benchmarks/results/proxy_load.{json,md}
    .venv/bin/python benchmarks/proxy_load.py --quick    # a smaller run for a smoke test
    .venv/bin/python benchmarks/proxy_load.py --redis-mode cluster   # Redis Cluster of 1-3 primaries
                                                         # (proxy_load_cluster.py; its own results)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import orjson
from fastapi import FastAPI, Request, Response

from distrs.core.model import Completion

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.redis_server import RedisServer  # noqa: E402

TARGETS = {
    "lifecycles_per_s": 2000.0,
    "share_of_framework": {"memory": 0.70, "redis": 0.55},
    "single_p99_ms": 10.0,  # one lifecycle of a batch of one at half the capacity, memory store
    "p50_ms": 2.0,
    "p99_ms": 20.0,
    "rss_mb": 300.0,
}


# --- a minimal keep-alive HTTP/1.1 client -------------------------------------------------------


def wait_ready(proc: subprocess.Popen[bytes], port: int, log_name: str, timeout_s: float = 60) -> None:
    """Poll the proxy on 127.0.0.1:``port`` until ``/readyz`` answers 200 (or it exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited; see {log_name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                if b" 200 " in s.recv(256):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("proxy did not become ready")


class Http:
    """One keep-alive connection; requests on it are sequential. ``Http.calls`` counts every call
    made (all connections), so a phase can report the HTTP calls it took per lifecycle."""

    calls = 0

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        if self.writer is None:
            await self._connect()
        assert self.reader is not None and self.writer is not None
        Http.calls += 1
        data = b"" if body is None else orjson.dumps(body)
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        self.writer.write(head + data)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked = 0, False
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            return status, b"".join(parts)
        return status, (await self.reader.readexactly(length)) if length else b""

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
            self.writer = None


# --- processes --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proxy:
    """``distrs proxy`` over ``redis_url``, or with the memory store when it is None; with
    ``floor`` set, the framework-floor app of this file instead (same server stack)."""

    redis_url: str | None
    workdir: Path
    floor: bool = False
    env: dict[str, str] = field(default_factory=dict)  # more DISTRS_* settings (cluster mode)
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
        env.update({"DISTRS_MAX_BULK": "4096", "PYTHONUNBUFFERED": "1"})
        if self.redis_url:
            env["DISTRS_REDIS_URL"] = self.redis_url
        env.update(self.env)
        if self.floor:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--serve-floor", str(self.port)]
        else:
            cmd = [sys.executable, "-m", "distrs.cli", "proxy", "--port", str(self.port), "--insecure"]
            cmd += ["--log-level", "warning"]
        log = open(self.workdir / f"proxy-{self.port}.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_ready(self.proc, self.port, log.name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def rss_mb(self) -> tuple[float, float]:
        """(VmRSS, VmHWM) of the proxy process in MB."""
        assert self.proc is not None
        vals = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024
        return vals["VmRSS"], vals["VmHWM"]

    def sched_s(self) -> tuple[float, float]:
        """(seconds run, seconds waited on a run queue) of the proxy's event-loop thread so far
        (``/proc/PID/schedstat``): the wait is the time it was ready but another process had
        the core."""
        assert self.proc is not None
        run_ns, wait_ns, _ = Path(f"/proc/{self.proc.pid}/schedstat").read_text().split()
        return int(run_ns) / 1e9, int(wait_ns) / 1e9

    def cpu_s(self) -> float:
        assert self.proc is not None
        f = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _redis_cmd(url_port: int, *args: str) -> str:
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is needed"
    return subprocess.run(
        [cli, "-p", str(url_port), *args], capture_output=True, text=True, check=True
    ).stdout


def _redis_used_memory(port: int) -> int:
    for line in _redis_cmd(port, "INFO", "memory").splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    return 0


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


P = ParamSpec("P")
R = TypeVar("R")


def generator_gc_off(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Hold this load generator's own cyclic collector off while a timed phase runs: its pauses
    (tens of ms once its tallies have grown) would land in the round trips it measures, which are
    the proxy's. What it allocates meanwhile is freed by reference counting or after the phase."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        gc.collect()
        gc.disable()
        try:
            return await fn(*args, **kwargs)
        finally:
            gc.enable()

    return run


def _payload() -> dict[str, Any]:
    return {"durations": {"compile": 0.0}, "fail_stage": None, "status": "ok"}


# --- phase 1: throughput ------------------------------------------------------------------------


async def _worker_loop(port: int, wid: str, stop: asyncio.Event, stats: dict[str, Any], lat: bool) -> None:
    c = Http("127.0.0.1", port)
    body_lease = {"stage": "compile", "worker_id": wid, "wait_s": 0.5}
    done_body = {"worker_id": wid, "outcome": "final", "result": {"status": "ok", "score": 1.0}, "run_s": 0.0}
    try:
        while not stop.is_set():
            status, raw = await c.call("POST", "/v1/leases", body_lease)
            if status == 204:
                continue
            if status != 200:
                stats["errors"] += 1
                continue
            t_lease = time.perf_counter()
            lease = orjson.loads(raw)
            if lat:
                sent = stats["submitted_at"].get(lease["request_id"])
                if sent is not None:
                    stats["dispatch"].append(t_lease - sent)
            t0 = time.perf_counter()
            status, _ = await c.call("POST", f"/v1/leases/{lease['lease_id']}/complete", done_body)
            if lat:
                stats["complete"].append(time.perf_counter() - t0)
            if status != 200:
                stats["errors"] += 1
            stats["completed"] += 1
    finally:
        await c.close()


async def _bundle_worker_loop(
    port: int, wid: str, stop: asyncio.Event, stats: dict[str, Any], k: int
) -> None:
    """A worker as ``distrs worker`` runs a short stage: a bundle of up to ``k`` leases per call,
    completed in one call."""
    c = Http("127.0.0.1", port)
    body_lease = {"stage": "compile", "worker_id": wid, "wait_s": 0.5, "max_items": k}
    result = {"status": "ok", "score": 1.0}
    try:
        while not stop.is_set():
            status, raw = await c.call("POST", "/v1/leases/bundle", body_lease)
            if status == 204:
                continue
            if status != 200:
                stats["errors"] += 1
                continue
            leases = orjson.loads(raw)["leases"]
            items = [
                {"lease_id": x["lease_id"], "outcome": "final", "result": result, "run_s": 0.0}
                for x in leases
            ]
            status, raw = await c.call("POST", "/v1/leases/complete", {"worker_id": wid, "items": items})
            if status != 200 or any("error" in it for it in orjson.loads(raw)["items"]):
                stats["errors"] += 1
            stats["completed"] += len(leases)
    finally:
        await c.close()


async def phase_throughput(
    port: int,
    n: int,
    batch_size: int,
    workers: int,
    inflight: int,
    task: str = "tp",
    bundle: int = 0,
    task_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``task_names``: batch b belongs to ``task_names[b % len(task_names)]`` (work spread over many tasks, e.g.
    over the shards of a cluster); all to ``task`` when empty."""
    stop = asyncio.Event()
    stats: dict[str, Any] = {"completed": 0, "errors": 0}
    if bundle:
        loops = [_bundle_worker_loop(port, f"w{i}", stop, stats, bundle) for i in range(workers)]
    else:
        loops = [_worker_loop(port, f"w{i}", stop, stats, False) for i in range(workers)]
    tasks = [asyncio.create_task(x) for x in loops]
    nbatches = n // batch_size
    sem = asyncio.Semaphore(inflight)
    results_seen = 0

    async def one_batch(b: int) -> None:
        nonlocal results_seen
        task_b = task_names[b % len(task_names)] if task_names else task
        c = Http("127.0.0.1", port)
        try:
            st, raw = await c.call(
                "POST", "/v1/batches", {"task": task_b, "batch_id": f"b{b}", "size": batch_size}
            )
            assert st == 201, raw
            reqs = [
                {"task": task_b, "batch_id": f"b{b}", "request_id": f"b{b}-{i}", "reward_type": "synthetic",
                 "payload": _payload()}
                for i in range(batch_size)
            ]  # fmt: skip
            st, raw = await c.call("POST", "/v1/requests", {"requests": reqs})
            assert st == 202 and orjson.loads(raw)["accepted"] == batch_size, raw
            while True:
                st, raw = await c.call("GET", f"/v1/batches/{task_b}/b{b}/results?wait_s=30")
                body = orjson.loads(raw)
                if body["complete"]:
                    assert len(body["results"]) == batch_size
                    results_seen += len(body["results"])
                    return
        finally:
            await c.close()
            sem.release()

    t0 = time.perf_counter()
    batch_tasks = []
    for b in range(nbatches):
        await sem.acquire()
        batch_tasks.append(asyncio.create_task(one_batch(b)))
    await asyncio.gather(*batch_tasks)
    elapsed = time.perf_counter() - t0
    stop.set()
    await asyncio.gather(*tasks)
    return {
        "requests": nbatches * batch_size,
        "results_fetched": results_seen,
        "workers": workers,
        "bundle": bundle,
        "batch_size": batch_size,
        "batches_in_flight": inflight,
        "elapsed_s": round(elapsed, 3),
        "lifecycles_per_s": round(nbatches * batch_size / elapsed, 1),
        "http_errors": stats["errors"],
    }


# --- phase 1b: the framework's own limit --------------------------------------------------------


def floor_app() -> Any:
    """The smallest app answering the worker calls of a lifecycle on the proxy's server stack.

    FastAPI routes at the same paths, each reading and parsing its JSON body and answering a body
    of the same shape as the proxy's (a lease, a completion), rendered with the same response
    class and served by the same uvicorn configuration (``uvicorn_config``, guarded httptools).
    It keeps no state: its rate is what the framework alone allows on this machine.
    """
    from distrs.proxy.responses import JSONResponse

    app = FastAPI()
    lease_view = {
        "lease_id": "l-0123456789abcdef", "request_id": "b0-0", "task": "tp", "batch_id": "b0",
        "stage": "compile", "reward_type": "synthetic", "payload": _payload(), "artifacts": {},
        "deadline": 1.0e9, "attempt": 1, "heartbeat_s": 2.0,
    }  # fmt: skip

    @app.get("/readyz")
    async def readyz() -> Response:
        return JSONResponse({"ready": True})

    @app.post("/v1/leases")
    async def lease(request: Request) -> Response:
        orjson.loads(await request.body())
        return JSONResponse(lease_view)

    @app.post("/v1/leases/{lease_id}/complete")
    async def complete(lease_id: str, request: Request) -> Response:
        orjson.loads(await request.body())
        return JSONResponse(
            {"lease_id": lease_id, "request_id": "b0-0", "next_stage": None, "batch_completed": False}
        )

    return app


def serve_floor(port: int) -> None:
    import uvicorn

    from distrs.config import ProxySettings
    from distrs.proxy.server import uvicorn_config

    settings = ProxySettings(port=port, insecure=True)
    uvicorn.Server(uvicorn_config(floor_app(), settings, log_level="warning")).run()


async def phase_floor(port: int, seconds: float, workers: int) -> dict[str, Any]:
    """HTTP calls per second the framework-floor app answers to the same worker loops."""
    stop = asyncio.Event()
    stats: dict[str, Any] = {"completed": 0, "errors": 0}
    calls0 = Http.calls
    tasks = [asyncio.create_task(_worker_loop(port, f"f{i}", stop, stats, False)) for i in range(workers)]
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    return {
        "seconds": round(elapsed, 2),
        "http_calls_per_s": round((Http.calls - calls0) / elapsed, 1),
        "http_errors": stats["errors"],
    }


async def _open_loop(
    port: int, rate: float, seconds: float, lifecycle: Callable[[Http], Awaitable[float]]
) -> list[float]:
    """``lifecycle`` started at ``rate`` per second for ``seconds`` (open loop), each on one of 64
    keep-alive connections; the seconds each took."""
    pool: asyncio.Queue[Http] = asyncio.Queue()
    for _ in range(64):
        pool.put_nowait(Http("127.0.0.1", port))
    lat: list[float] = []

    async def one() -> None:
        c = await pool.get()
        try:
            lat.append(await lifecycle(c))
        finally:
            pool.put_nowait(c)

    t0 = time.perf_counter()
    started = []
    for i in range(int(rate * seconds)):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        started.append(asyncio.create_task(one()))
    await asyncio.gather(*started)
    while not pool.empty():
        await pool.get_nowait().close()
    return lat


@generator_gc_off
async def phase_floor_single(port: int, rate: float, seconds: float) -> dict[str, Any]:
    """The floor app's share of a batch-of-one lifecycle: its five calls (three lease-shaped,
    two completion-shaped, one after another on one connection, as the proxy's lifecycle makes
    them on its trainer and worker connections) at ``rate`` lifecycles/s, open loop."""
    body = {"stage": "compile", "worker_id": "f", "wait_s": 0}
    done = {"worker_id": "f", "outcome": "final", "run_s": 0.001, "result": {"status": "ok", "score": 1.0}}
    calls = (("/v1/leases", body), ("/v1/leases", body), ("/v1/leases/l-0/complete", done),
             ("/v1/leases", body), ("/v1/leases/l-0/complete", done))  # fmt: skip

    async def five(c: Http) -> float:
        t = time.perf_counter()
        for path, b in calls:
            st, raw = await c.call("POST", path, b)
            assert st == 200, raw
        return time.perf_counter() - t

    ms = [x * 1000 for x in await _open_loop(port, rate, seconds, five)]
    return {
        "mode": f"{rate:.0f}/s offered",
        "lifecycles": len(ms),
        "lifecycle_p50_ms": round(_pct(ms, 50), 3),
        "lifecycle_p99_ms": round(_pct(ms, 99), 3),
    }


# --- phase 2: latency at a fixed rate -----------------------------------------------------------


@generator_gc_off
async def phase_latency(
    port: int, rate: float, seconds: float, workers: int, task: str = "lat"
) -> dict[str, Any]:
    n = int(rate * seconds)
    stop = asyncio.Event()
    stats: dict[str, Any] = {"completed": 0, "errors": 0, "dispatch": [], "complete": [], "submitted_at": {}}
    tasks = [asyncio.create_task(_worker_loop(port, f"lw{i}", stop, stats, True)) for i in range(workers)]
    c0 = Http("127.0.0.1", port)
    st, raw = await c0.call("POST", "/v1/batches", {"task": task, "batch_id": "b0", "size": n})
    assert st == 201, raw
    await asyncio.sleep(0.5)  # let the workers park on their long-polls
    pool: asyncio.Queue[Http] = asyncio.Queue()
    for _ in range(32):
        pool.put_nowait(Http("127.0.0.1", port))
    submit_lat: list[float] = []
    late = 0

    async def submit(i: int) -> None:
        c = await pool.get()
        try:
            body = {"task": task, "batch_id": "b0", "request_id": f"q{i}", "reward_type": "synthetic",
                    "payload": _payload()}  # fmt: skip
            t0 = time.perf_counter()
            stats["submitted_at"][f"q{i}"] = t0
            st, raw = await c.call("POST", "/v1/requests", body)
            t1 = time.perf_counter()
            assert st == 202, raw
            submit_lat.append(t1 - t0)
        finally:
            pool.put_nowait(c)

    lag_ms: list[float] = []
    ticker = asyncio.create_task(_loop_lag(lag_ms))
    start = time.perf_counter()
    subs = []
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            late += 1
        subs.append(asyncio.create_task(submit(i)))
    await asyncio.gather(*subs)
    achieved = n / (time.perf_counter() - start)
    ticker.cancel()
    deadline = time.monotonic() + 30
    while stats["completed"] < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    while not pool.empty():
        await pool.get_nowait().close()
    await c0.close()

    def summary(xs: list[float]) -> dict[str, float]:
        ms = [x * 1000 for x in xs]
        return {"n": len(ms), "p50_ms": round(_pct(ms, 50), 3), "p90_ms": round(_pct(ms, 90), 3),
                "p99_ms": round(_pct(ms, 99), 3), "max_ms": round(max(ms), 3) if ms else float("nan")}  # fmt: skip

    return {
        "offered_rate": rate,
        "achieved_submit_rate": round(achieved, 1),
        "late_sends": late,
        "seconds": seconds,
        "completed": stats["completed"],
        "submit": summary(submit_lat),
        "complete": summary(stats["complete"]),
        "dispatch": summary(stats["dispatch"]),
        # the load generator's own lateness: how late its event loop woke a 5 ms timer while it
        # sent (its delays are in every round trip above, but are not the proxy's)
        "generator_lag": {
            "n": len(lag_ms),
            "p50_ms": round(_pct(lag_ms, 50), 3),
            "p99_ms": round(_pct(lag_ms, 99), 3),
            "max_ms": round(max(lag_ms), 3) if lag_ms else float("nan"),
        },
    }


async def _loop_lag(out: list[float], period_s: float = 0.005) -> None:
    """Record how late this process's event loop wakes a ``period_s`` timer, in ms."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(period_s)
        out.append(max(0.0, (time.perf_counter() - t0 - period_s) * 1000))


# --- phase 2b: batches of one request (per-sample reward functions) -----------------------------


async def _one_lifecycle(c: Http, task: str, n: int) -> float:
    """One trainer's per-sample call sequence on connection ``c``: register a batch of one, submit
    its request, long-poll its result. Returns the seconds from the register call to the result."""
    t0 = time.perf_counter()
    st, raw = await c.call("POST", "/v1/batches", {"task": task, "batch_id": f"s{n}", "size": 1})
    assert st == 201, raw
    body = {"task": task, "batch_id": f"s{n}", "request_id": f"s{n}", "reward_type": "synthetic",
            "payload": _payload()}  # fmt: skip
    st, raw = await c.call("POST", "/v1/requests", body)
    assert st == 202, raw
    while True:
        st, raw = await c.call("GET", f"/v1/batches/{task}/s{n}/results?wait_s=30")
        assert st == 200, raw
        if orjson.loads(raw)["complete"]:
            return time.perf_counter() - t0


@generator_gc_off
async def phase_single(
    port: int, seconds: float, workers: int, trainers: int = 0, rate: float = 0.0, task: str = "one"
) -> dict[str, Any]:
    """Batches of one request, as per-sample reward functions send them (register, submit, lease,
    complete, result: 5 calls). Closed loop with ``trainers`` concurrent trainers (capacity), or
    open loop at ``rate`` lifecycles/s (the lifecycle's round trip at that rate)."""
    stop = asyncio.Event()
    stats: dict[str, Any] = {"completed": 0, "errors": 0}
    loops = [
        asyncio.create_task(_worker_loop(port, f"{task}w{i}", stop, stats, False)) for i in range(workers)
    ]
    await asyncio.sleep(0.3)  # the workers park on their long-polls
    lat: list[float] = []
    counter = iter(range(10**9))
    calls0 = Http.calls
    t0 = time.perf_counter()
    if trainers:

        async def trainer() -> None:
            c = Http("127.0.0.1", port)
            try:
                while time.perf_counter() - t0 < seconds:
                    lat.append(await _one_lifecycle(c, task, next(counter)))
            finally:
                await c.close()

        await asyncio.gather(*(trainer() for _ in range(trainers)))
    else:
        lat += await _open_loop(port, rate, seconds, lambda c: _one_lifecycle(c, task, next(counter)))
    elapsed = time.perf_counter() - t0
    calls = Http.calls - calls0
    stop.set()
    await asyncio.gather(*loops)
    ms = [x * 1000 for x in lat]
    return {
        "mode": f"{trainers} trainers" if trainers else f"{rate:.0f}/s offered",
        "lifecycles": len(lat),
        "seconds": round(elapsed, 2),
        "lifecycles_per_s": round(len(lat) / elapsed, 1),
        "http_calls_per_lifecycle": round(calls / max(1, len(lat)), 2),
        "lifecycle_p50_ms": round(_pct(ms, 50), 3),
        "lifecycle_p99_ms": round(_pct(ms, 99), 3),
        "http_errors": stats["errors"],
    }


# --- phase 0: the store alone (no HTTP) ---------------------------------------------------------


async def phase_store(redis_url: str, n: int, workers: int) -> dict[str, Any]:
    """Lifecycles/s and client CPU per lifecycle of each store called directly, side by side."""
    from distrs.config import StoreSettings
    from distrs.core.model import BatchInfo, Result, Status
    from distrs.store.base import NewRequest, QueueStore
    from distrs.store.memory import MemoryStore
    from distrs.store.redis import RedisStore

    async def run(store: QueueStore) -> dict[str, float]:
        await store.start()
        await store.register_batch(BatchInfo(task="s", batch_id="b", size=n), 1.0)
        reqs = [
            NewRequest(task="s", batch_id="b", request_id=f"r{i}", reward_type="synthetic",
                       route=["compile"], payload=_payload())
            for i in range(n)
        ]  # fmt: skip
        final = Result(request_id="", status=Status.OK, score=1.0)
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(0, n, 1000):
            await store.submit(reqs[i : i + 1000], 2.0)

        async def worker(k: int) -> None:
            while (lease := await store.lease("compile", f"w{k}", 3.0, 30.0)) is not None:
                await store.complete(Completion(lease_id=lease.lease_id, result=final), f"w{k}", 4.0)

        await asyncio.gather(*(worker(k) for k in range(workers)))
        assert len(await store.batch_results("s", "b")) == n
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        await store.close()
        return {
            "lifecycles_per_s": round(n / wall, 1),
            "client_cpu_ms_per_lifecycle": round(1000 * cpu / n, 3),
        }

    settings = StoreSettings.model_validate({"redis_url": redis_url})
    return {
        "requests": n,
        "redis": await run(RedisStore.from_url(redis_url, settings, namespace="bench-store")),
        "memory": await run(MemoryStore()),
    }


def machine(version: list[str], load0: tuple[float, float, float]) -> dict[str, Any]:
    """The machine a run measured: CPUs, platform, Python, Redis (from ``redis-server --version``
    words) and the load average at the start and now."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis": next((v.split("=")[1] for v in version if v.startswith("v=")), "?"),
        "load_average_at_start": load0,
        "load_average_at_end": os.getloadavg(),
    }


def _machine_speed_us() -> float:
    """Time of ``sum(range(1000))`` in microseconds: puts this machine's CPU in context."""
    import timeit

    return round(min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6, 1)


# --- phase 3: memory ----------------------------------------------------------------------------


async def phase_memory(proxy: Proxy, redis_port: int, queued: int) -> dict[str, Any]:
    c = Http("127.0.0.1", proxy.port)
    rss0, _ = proxy.rss_mb()
    mem0 = _redis_used_memory(redis_port)
    bulk = 4096
    st, raw = await c.call("POST", "/v1/batches", {"task": "mem", "batch_id": "big", "size": queued})
    assert st == 201, raw
    for start in range(0, queued, bulk):
        reqs = [
            {"task": "mem", "batch_id": "big", "request_id": f"m{i}", "reward_type": "synthetic",
             "payload": _payload()}
            for i in range(start, min(queued, start + bulk))
        ]  # fmt: skip
        st, raw = await c.call("POST", "/v1/requests", {"requests": reqs})
        assert st == 202, raw
    st, raw = await c.call("GET", "/v1/stats")
    depth = None
    if st == 200:
        depth = orjson.loads(raw).get("queues")
    await c.close()
    rss1, hwm = proxy.rss_mb()
    mem1 = _redis_used_memory(redis_port)
    return {
        "queued": queued,
        "proxy_rss_before_mb": round(rss0, 1),
        "proxy_rss_mb": round(rss1, 1),
        "proxy_peak_rss_mb": round(hwm, 1),
        "redis_used_memory_mb": round(mem1 / 2**20, 1),
        "redis_bytes_per_queued_request": round((mem1 - mem0) / queued),
        "stats_queues": depth,
    }


# --- driver -------------------------------------------------------------------------------------


def _redis_cpu_s(port: int) -> float:
    """Redis server CPU seconds so far (user + system, ``INFO CPU``)."""
    vals = {}
    for line in _redis_cmd(port, "INFO", "cpu").splitlines():
        k, _, v = line.strip().partition(":")
        if k in ("used_cpu_sys", "used_cpu_user"):
            vals[k] = float(v)
    return sum(vals.values())


def _redis_commands(port: int) -> int:
    """Commands Redis has processed so far (``INFO stats``; a script counts as one, and so does
    each command it runs)."""
    for line in _redis_cmd(port, "INFO", "stats").splitlines():
        k, _, v = line.strip().partition(":")
        if k == "total_commands_processed":
            return int(v)
    return 0


def _markdown(res: dict[str, Any]) -> str:
    runs, mem, fl = res["runs"], res["memory"], res["floor"]
    ok = res["verdict"]
    m = res["machine"]
    lines = [
        "# Proxy load benchmark: memory store and real Redis against the framework's own limit",
        "",
        f"Machine: {m['cpus']} CPUs, {m['platform']}; redis-server {m['redis']} with AOF "
        f"(appendfsync {res['appendfsync']}); one proxy process. Load generator, proxy and Redis share "
        f"the machine; load average at the start {', '.join(f'{x:.1f}' for x in m['load_average_at_start'])}, "
        f"at the end {', '.join(f'{x:.1f}' for x in m['load_average_at_end'])} (a shared machine: compare the "
        "ratios, measured side by side in this run, more than the absolute rates).",
        "",
        f"Framework limit: a minimal FastAPI app on the proxy's uvicorn stack (`floor_app`) answered "
        f"{' / '.join(str(x['http_calls_per_s']) for x in fl)} HTTP calls/s (before / after the proxy runs) "
        f"to the same {res['workers']} worker loops; divided by the HTTP calls one lifecycle takes through "
        "the proxy it gives the framework's lifecycle limit.",
        "",
        "| metric | memory store | Redis | target | met (memory / Redis) |",
        "|---|---|---|---|---|",
    ]
    for key, label in (("throughput", "one lease per call"), ("bundled", "bundles")):
        mt, rt = runs["memory"][key], runs["redis"][key]
        okk = "" if key == "throughput" else "_bundled"
        who = f"{mt['workers']} workers" + (f", bundles of up to {mt['bundle']}" if mt["bundle"] else "")
        lines += [
            f"| **{label}**: lifecycles/s (register+submit+lease+complete+result, {who}) "
            f"| {mt['lifecycles_per_s']} | {rt['lifecycles_per_s']} | >= {TARGETS['lifecycles_per_s']:.0f} "
            f"| {ok['memory']['throughput' + okk]} / {ok['redis']['throughput' + okk]} |",
            f"| {label}: HTTP calls per lifecycle | {mt['http_calls_per_lifecycle']} "
            f"| {rt['http_calls_per_lifecycle']} | — | — |",
        ]
        if key == "throughput":  # a bundle call carries k leases: the floor app's calls are not comparable
            lines += [
                f"| {label}: framework limit, lifecycles/s | {mt['framework_limit_per_s']} "
                f"| {rt['framework_limit_per_s']} | — | — |",
                f"| {label}: share of the framework limit | {mt['share_of_framework']:.2f} "
                f"| {rt['share_of_framework']:.2f} | >= {TARGETS['share_of_framework']['memory']:.2f} / "
                f"{TARGETS['share_of_framework']['redis']:.2f} "
                f"| {ok['memory']['share']} / {ok['redis']['share']} |",
            ]
        lines += [
            f"| {label}: proxy CPU ms per lifecycle | {mt['proxy_cpu_ms_per_lifecycle']} "
            f"| {rt['proxy_cpu_ms_per_lifecycle']} | — | — |",
            f"| {label}: Redis server CPU ms per lifecycle (`INFO CPU`) | — | {rt['redis_cpu_ms_per_lifecycle']} "
            "| — | — |",
            f"| {label}: Redis commands per lifecycle (`INFO stats`; a script's own count too) | — "
            f"| {rt.get('redis_commands_per_lifecycle', '—')} | — | — |",
        ]
    for rate_run in ("latency",):
        ml, rl = runs["memory"][rate_run], runs["redis"][rate_run]
        for name in ("submit", "complete", "dispatch"):
            a, b = ml[name], rl[name]
            lines.append(
                f"| {name} latency at {ml['offered_rate']:.0f} req/s, p50 / p99 (ms) | {a['p50_ms']} / {a['p99_ms']} "
                f"| {b['p50_ms']} / {b['p99_ms']} | <= {TARGETS['p50_ms']} / <= {TARGETS['p99_ms']} "
                f"| {ok['memory']['latency_' + name]} / {ok['redis']['latency_' + name]} |"
            )
    ms, rs = runs["memory"]["single"], runs["redis"]["single"]
    mh, rh = runs["memory"]["single_half"], runs["redis"]["single_half"]
    lines += [
        f"| **batches of one** (register, submit, lease, complete, result; {ms['mode']}): lifecycles/s "
        f"| {ms['lifecycles_per_s']} | {rs['lifecycles_per_s']} | — | — |",
        f"| batches of one: HTTP calls per lifecycle | {ms['http_calls_per_lifecycle']} "
        f"| {rs['http_calls_per_lifecycle']} | — | — |",
        f"| batches of one at half the capacity ({mh['mode']} / {rh['mode']}): lifecycle p50 / p99 (ms) "
        f"| {mh['lifecycle_p50_ms']} / {mh['lifecycle_p99_ms']} | {rh['lifecycle_p50_ms']} / "
        f"{rh['lifecycle_p99_ms']} | — | — |",
        f"| batches of one at half the capacity: the floor app's five calls at the same rate, p99 (ms); "
        f"p99 the proxy adds | {mh['floor_p99_ms']}; {mh['added_p99_ms']} | — "
        f"| added p99 <= {TARGETS['single_p99_ms']} (memory) | {ok['memory']['single_p99']} / — |",
    ]
    lines += [
        f"| proxy RSS with {mem['queued']:,} queued, Redis (MB) | — | {mem['proxy_rss_mb']} "
        f"(peak {mem['proxy_peak_rss_mb']}) | <= {TARGETS['rss_mb']:.0f} | {ok['rss']} |",
        "",
    ]
    for name in ("memory", "redis"):
        t, lat = runs[name]["throughput"], runs[name]["latency"]
        b, g = runs[name]["bundled"], runs[name]["latency"]["generator_lag"]
        lines.append(
            f"{name}, bundles: {b['requests']:,} requests in {b['elapsed_s']} s, proxy CPU {b['proxy_cpu_s']} s, "
            f"HTTP errors {b['http_errors']}."
        )
        lines.append(
            f"{name}: {t['requests']:,} requests in {t['elapsed_s']} s, batches of {t['batch_size']} "
            f"({t['batches_in_flight']} in flight), proxy CPU {t['proxy_cpu_s']} s, HTTP errors {t['http_errors']}; "
            f"latency run {lat['completed']} requests at {lat['achieved_submit_rate']} req/s achieved "
            f"({lat['late_sends']} sends more than 5 ms late; the generator's own event loop woke a 5 ms "
            f"timer late by p50 {g['p50_ms']} / p99 {g['p99_ms']} / max {g['max_ms']} ms, which is in the "
            "round trips above but not the proxy's; the proxy ran "
            f"{lat.get('proxy_run_s', '?')} s and waited {lat.get('proxy_runqueue_wait_s', '?')} s on a "
            "run queue for a core held by another process)."
        )
    sa = res["store_alone"]
    lines += [
        "",
        "Latency: submit and complete are the round trips the proxy (and its store calls) add on "
        "loopback; dispatch = submit sent -> a waiting worker holds the lease.",
        f"Store alone (no HTTP, {sa['requests']:,} lifecycles, {res['workers']} coroutines): "
        f"redis {sa['redis']['lifecycles_per_s']}/s at {sa['redis']['client_cpu_ms_per_lifecycle']} ms client CPU "
        f"per lifecycle; memory {sa['memory']['lifecycles_per_s']}/s at "
        f"{sa['memory']['client_cpu_ms_per_lifecycle']} ms.",
        f"Machine speed for context: `sum(range(1000))` takes {m['sum_range_1000_us']} µs.",
        f"Redis memory: {mem['redis_bytes_per_queued_request']} bytes per queued request "
        f"({mem['redis_used_memory_mb']} MB used with {mem['queued']:,} queued).",
        "",
        f"Command: `{res['command']}`",
        "",
    ]
    return "\n".join(lines)


async def _floor(
    work: Path, seconds: float, workers: int, single_rate: float = 0.0, single_seconds: float = 0.0
) -> dict[str, Any]:
    """The floor app's call rate; with ``single_rate``, also its five-call lifecycle at that rate."""
    floor = Proxy(None, work, floor=True)
    floor.start()
    try:
        await phase_floor(floor.port, 1.0, workers)  # warm-up
        out = await phase_floor(floor.port, seconds, workers)
        if single_rate:
            out["single_half"] = await phase_floor_single(floor.port, single_rate, single_seconds)
        return out
    finally:
        floor.stop()


async def _measured(
    proxy: Proxy, redis_port: int | None, args: argparse.Namespace, workers: int, bundle: int, task: str
) -> dict[str, Any]:
    """One throughput run with the proxy's CPU, Redis' CPU and the HTTP calls it took."""
    rcpu = (lambda: _redis_cpu_s(redis_port)) if redis_port else (lambda: 0.0)
    rcmd = (lambda: _redis_commands(redis_port)) if redis_port else (lambda: 0)
    cpu0, rcpu0, rcmd0, calls0 = proxy.cpu_s(), rcpu(), rcmd(), Http.calls
    thr = await phase_throughput(
        proxy.port, args.requests, args.batch_size, workers, args.inflight, task, bundle=bundle
    )
    cpu, rc, cmds, calls = proxy.cpu_s() - cpu0, rcpu() - rcpu0, rcmd() - rcmd0, Http.calls - calls0
    thr["proxy_cpu_s"] = round(cpu, 2)
    thr["proxy_cpu_ms_per_lifecycle"] = round(1000 * cpu / thr["requests"], 3)
    # 204s of idle long-polls at the end are part of the cost, so they are counted too
    thr["http_calls_per_lifecycle"] = round(calls / thr["requests"], 3)
    if redis_port:
        thr["redis_cpu_s"] = round(rc, 2)
        thr["redis_cpu_ms_per_lifecycle"] = round(1000 * rc / thr["requests"], 4)
        thr["redis_commands_per_lifecycle"] = round(cmds / thr["requests"], 2)
    return thr


async def _one_store(
    args: argparse.Namespace, work: Path, redis_url: str | None, redis_port: int
) -> dict[str, Any]:
    proxy = Proxy(redis_url, work)
    proxy.start()
    name = "redis" if redis_url else "memory"
    rport = redis_port if redis_url else None
    try:
        # warm-up: import paths, script cache, connection pool
        await phase_throughput(proxy.port, 2 * args.batch_size, args.batch_size, args.workers, 2, "warmup")
        thr = await _measured(proxy, rport, args, args.workers, 0, "tp")
        print(f"{name} throughput: {thr['lifecycles_per_s']} lifecycles/s", flush=True)
        bun = await _measured(proxy, rport, args, args.bundle_workers, args.bundle, "tpb")
        print(
            f"{name} throughput, bundles of {args.bundle}: {bun['lifecycles_per_s']} lifecycles/s", flush=True
        )
        run0, wait0 = proxy.sched_s()
        lat = await phase_latency(proxy.port, args.rate, args.seconds, args.workers, task=f"lat-{name}")
        run1, wait1 = proxy.sched_s()
        # how much of the latency phase the proxy spent ready to run but not running (other
        # processes on the machine): delays the proxy's code cannot remove
        lat["proxy_run_s"], lat["proxy_runqueue_wait_s"] = round(run1 - run0, 2), round(wait1 - wait0, 2)
        print(
            f"latency: submit p50 {lat['submit']['p50_ms']} ms p99 {lat['submit']['p99_ms']} ms; "
            f"complete p50 {lat['complete']['p50_ms']} p99 {lat['complete']['p99_ms']}; "
            f"dispatch p50 {lat['dispatch']['p50_ms']} p99 {lat['dispatch']['p99_ms']}",
            flush=True,
        )
        cap = await phase_single(
            proxy.port, args.single_seconds, args.workers, trainers=args.workers, task="one-cap"
        )
        half = await phase_single(
            proxy.port,
            args.single_seconds,
            args.workers,
            rate=max(1.0, cap["lifecycles_per_s"] / 2),
            task="one-half",
        )
        print(
            f"{name} batches of one: {cap['lifecycles_per_s']} lifecycles/s; at half that rate "
            f"p50 {half['lifecycle_p50_ms']} p99 {half['lifecycle_p99_ms']} ms",
            flush=True,
        )
        return {"throughput": thr, "bundled": bun, "latency": lat, "single": cap, "single_half": half}
    finally:
        proxy.stop()


async def _amain(args: argparse.Namespace) -> dict[str, Any]:
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="distrs-bench-") as tmp:
        work = Path(tmp)
        redis = RedisServer(work / "redis", appendfsync=args.appendfsync)
        redis.data_dir.mkdir()
        redis.start()
        proxies: list[Proxy] = []
        try:
            store = await phase_store(redis.url, args.store_requests, args.workers)
            print(f"store alone: {store}", flush=True)
            floors = [await _floor(work, args.floor_seconds, args.workers)]
            runs = {
                "memory": await _one_store(args, work, None, redis.port),
                "redis": await _one_store(args, work, redis.url, redis.port),
            }
            half = runs["memory"]["single_half"]
            rate = float(half["mode"].split("/")[0])
            floors.append(await _floor(work, args.floor_seconds, args.workers, rate, args.single_seconds))
            half["floor_p99_ms"] = floors[-1]["single_half"]["lifecycle_p99_ms"]
            half["added_p99_ms"] = round(half["lifecycle_p99_ms"] - half["floor_p99_ms"], 3)
            print(f"framework floor: {floors}", flush=True)
            _redis_cmd(redis.port, "FLUSHALL")
            fresh = Proxy(redis.url, work)
            proxies.append(fresh)
            fresh.start()
            mem = await phase_memory(fresh, redis.port, args.queued)
            print(f"memory: proxy RSS {mem['proxy_rss_mb']} MB with {mem['queued']} queued", flush=True)
        finally:
            for p in proxies:
                p.stop()
            redis.stop()
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    floor_calls = sum(f["http_calls_per_s"] for f in floors) / len(floors)
    verdict: dict[str, Any] = {"rss": mem["proxy_rss_mb"] <= TARGETS["rss_mb"]}
    for name, run in runs.items():
        thr, lat = run["throughput"], run["latency"]
        thr["framework_limit_per_s"] = round(floor_calls / thr["http_calls_per_lifecycle"], 1)
        thr["share_of_framework"] = round(thr["lifecycles_per_s"] / thr["framework_limit_per_s"], 3)
        v = {
            "throughput": thr["lifecycles_per_s"] >= TARGETS["lifecycles_per_s"],
            "share": thr["share_of_framework"] >= TARGETS["share_of_framework"][name],
            "throughput_bundled": run["bundled"]["lifecycles_per_s"] >= TARGETS["lifecycles_per_s"],
        }
        for call in ("submit", "complete", "dispatch"):
            v["latency_" + call] = (
                lat[call]["p50_ms"] <= TARGETS["p50_ms"] and lat[call]["p99_ms"] <= TARGETS["p99_ms"]
            )
        if name == "memory":
            v["single_p99"] = run["single_half"]["added_p99_ms"] <= TARGETS["single_p99_ms"]
        verdict[name] = v
    return {
        "benchmark": "proxy_load",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {**machine(version, load0), "sum_range_1000_us": _machine_speed_us()},
        "appendfsync": args.appendfsync,
        "workers": args.workers,
        "targets": TARGETS,
        "store_alone": store,
        "floor": floors,
        "runs": runs,
        "memory": mem,
        "verdict": verdict,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000, help="Lifecycles in the throughput phase.")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--store-requests", type=int, default=5000, help="Lifecycles in the store-alone phase.")
    ap.add_argument(
        "--inflight", type=int, default=4, help="Batches submitted ahead in the throughput phase."
    )
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--bundle", type=int, default=32, help="Leases per bundle in the bundled run.")
    ap.add_argument("--bundle-workers", type=int, default=8, help="Workers in the bundled run.")
    ap.add_argument("--rate", type=float, default=500.0, help="Submits per second in the latency phase.")
    ap.add_argument("--seconds", type=float, default=10.0, help="Length of the latency phase.")
    ap.add_argument("--single-seconds", type=float, default=6.0, help="Length of each batches-of-one run.")
    ap.add_argument("--queued", type=int, default=100_000, help="Requests queued in the memory phase.")
    ap.add_argument(
        "--floor-seconds", type=float, default=8.0, help="Length of each framework-limit measurement."
    )
    ap.add_argument("--serve-floor", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--appendfsync", default="everysec", choices=["everysec", "always", "no"])
    ap.add_argument("--quick", action="store_true", help="Small sizes (smoke test).")
    ap.add_argument(
        "--redis-mode",
        choices=["standalone", "cluster"],
        default=None,
        help="cluster: the capacity run over Redis Clusters of 1, 2 and 3 primaries instead "
        "(benchmarks/proxy_load_cluster.py; writes proxy_load_cluster.{json,md}).",
    )
    ap.add_argument("--primaries", default="1,2,3", help="Cluster sizes of the cluster run.")
    ap.add_argument("--cluster-replicas", type=int, default=0, help="Replicas per primary (cluster run).")
    ap.add_argument("--tasks-per-shard", type=int, default=8, help="Tasks per primary (cluster run).")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    if args.serve_floor is not None:
        serve_floor(args.serve_floor)
        return
    if args.quick:
        args.requests, args.seconds, args.queued, args.store_requests = 4000, 3.0, 10_000, 1000
        args.floor_seconds, args.single_seconds = 3.0, 2.0
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (make system-deps)")
    # the generator's own collector pauses would show up as proxy latency: same policy as the proxy
    from distrs.proxy.gc_policy import GcPolicy

    GcPolicy().install()
    if args.redis_mode == "cluster":
        from proxy_load_cluster import run_cluster

        run_cluster(args)
        return
    res = asyncio.run(_amain(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proxy_load.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "proxy_load.md").write_text(_markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
