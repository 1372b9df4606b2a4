"""Replaying a workload trace against a live service, the way trainers would drive it.

Each task is one coroutine walking its iterations in order: it registers the batch at the
(compressed) rollout start — the warm-up hint — submits each request at its arrival time with a
``synthetic`` payload whose stage durations are the trace's divided by ``speedup``, then waits for
the batch's results. In colocated mode the next rollout starts only after the rewards are back,
so later batches shift by the extra delay suffered (the trace README's closed-loop rule).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

# Trace status -> (stage where the request ends, final status) for the synthetic payload.
STATUS_MAP: dict[str, tuple[str | None, str]] = {
    "success": (None, "ok"),
    "gen_failed": ("first", "invalid"),
    "compile_failed": ("compile", "compile_error"),
    "compile_timeout": ("compile", "timeout"),
    "exec_error": ("execute", "runtime_error"),
    "exec_timeout": ("execute", "timeout"),
}


@dataclass(frozen=True)
class ReplayRequest:
    index: int
    arrival: float
    status: str
    durations: dict[str, float]


@dataclass(frozen=True)
class ReplayBatch:
    task: str
    iteration: int
    rollout_start: float
    requests: tuple[ReplayRequest, ...]


@dataclass
class BatchReport:
    task: str
    batch_id: str
    size: int
    extra_delay_s: float | None
    busy_s: dict[str, float] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    earliest_s: float | None = None
    """T (Eq. 1-2) measured from the batch's registration: when its rewards came back less d."""


def synthetic_payload(req: ReplayRequest, stages: Sequence[str], speedup: float) -> dict[str, Any]:
    durations = {s: round(req.durations.get(s, 0.0) / speedup, 4) for s in stages}
    fail_stage, status = STATUS_MAP.get(req.status, (None, "ok"))
    if fail_stage == "first":
        fail_stage = stages[0]
    return {"durations": durations, "fail_stage": fail_stage, "status": status}


class Replayer:
    def __init__(
        self,
        client: httpx.AsyncClient,
        batches: Sequence[ReplayBatch],
        stages: Sequence[str],
        speedup: float,
        colocated: bool = True,
        on_request_done: Callable[[int], None] | None = None,
        on_batch_done: Callable[[BatchReport], None] | None = None,
        flush_window_s: float = 0.01,
    ) -> None:
        self.client, self.batches, self.stages, self.speedup = client, batches, list(stages), speedup
        self.colocated = colocated
        self.on_request_done = on_request_done or (lambda n: None)
        self.on_batch_done = on_batch_done or (lambda r: None)
        self.flush_window_s = flush_window_s
        self.origin = min((b.rollout_start for b in batches), default=0.0)
        self.reports: list[BatchReport] = []

    async def _post(self, path: str, body: Any, ok: tuple[int, ...]) -> httpx.Response:
        for attempt in range(8):
            try:
                r = await self.client.post(path, json=body)
                if r.status_code in ok:
                    return r
                if r.status_code < 500 and r.status_code != 429:
                    raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
            except httpx.TransportError:
                pass
            await asyncio.sleep(min(2.0, 0.05 * 2**attempt))
        raise RuntimeError(f"{path}: service unavailable")

    async def _sleep_until(self, start: float, trace_t: float) -> None:
        delay = start + (trace_t - self.origin) / self.speedup - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _run_batch(self, b: ReplayBatch, start: float, shift: float) -> BatchReport:
        batch_id = f"it{b.iteration}"
        await self._sleep_until(start, b.rollout_start + shift)
        t0 = time.monotonic()
        registered = time.time()
        await self._post(
            "/v1/batches",
            {
                "task": b.task,
                "batch_id": batch_id,
                "size": len(b.requests),
                "reward_type": "synthetic",
                "rollout_started_at": registered,
            },
            (200, 201),
        )
        reqs = sorted(b.requests, key=lambda q: q.arrival)
        i = 0
        while i < len(reqs):
            await self._sleep_until(start, reqs[i].arrival + shift)
            horizon = reqs[i].arrival + shift + self.flush_window_s * self.speedup
            chunk = []
            while i < len(reqs) and reqs[i].arrival + shift <= horizon:
                q = reqs[i]
                chunk.append(
                    {
                        "task": b.task,
                        "batch_id": batch_id,
                        "request_id": f"{batch_id}-r{q.index}",
                        "reward_type": "synthetic",
                        "payload": synthetic_payload(q, self.stages, self.speedup),
                    }
                )
                i += 1
            await self._post("/v1/requests", {"requests": chunk}, (202,))
        done = 0
        while True:
            r = await self.client.get(f"/v1/batches/{b.task}/{batch_id}/results", params={"wait_s": 10})
            r.raise_for_status()
            body = r.json()
            if body["done"] > done:
                self.on_request_done(body["done"] - done)
                done = body["done"]
            if body["complete"]:
                break
        back = time.time()
        d = body["extra_delay_s"]
        rep = BatchReport(
            task=b.task,
            batch_id=batch_id,
            size=len(b.requests),
            extra_delay_s=d,
            wall_s=time.monotonic() - t0,
            earliest_s=None if d is None else back - registered - d,
        )
        for res in body["results"]:
            rep.statuses[res["status"]] = rep.statuses.get(res["status"], 0) + 1
            for st in res["stages"]:
                rep.busy_s[st["name"]] = rep.busy_s.get(st["name"], 0.0) + st["run_s"]
        return rep

    async def _run_task(self, task_batches: list[ReplayBatch], start: float) -> None:
        shift = 0.0
        for b in sorted(task_batches, key=lambda x: x.iteration):
            rep = await self._run_batch(b, start, shift)
            self.reports.append(rep)
            self.on_batch_done(rep)
            if self.colocated and rep.extra_delay_s:
                shift += rep.extra_delay_s * self.speedup  # back to trace seconds
        return None

    async def run(self) -> list[BatchReport]:
        by_task: dict[str, list[ReplayBatch]] = {}
        for b in self.batches:
            by_task.setdefault(b.task, []).append(b)
        start = time.monotonic()
        await asyncio.gather(*(self._run_task(bs, start) for bs in by_task.values()))
        return self.reports
