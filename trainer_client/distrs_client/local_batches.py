"""What the asyncio client keeps locally: the requests it buffers, each batch's local copies and
results, and the callers waiting for the buffer to be posted (``aio.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from distrs_client.errors import APIError, DistrsError
from distrs_client.models import RewardResult


@dataclass(frozen=True)
class Item:
    """One submitted request, as buffered until the flusher posts it."""

    task: str
    batch_id: str
    request_id: str
    reward_type: str
    payload: dict[str, Any]


@dataclass
class Batch:
    """Everything the client knows about one batch."""

    task: str
    batch_id: str
    size: int | None = None
    reward_type: str | None = None
    rollout_started_at: float | None = None
    order: list[str] = field(default_factory=list)  # local submission order
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # local copies, no result yet
    results: dict[str, RewardResult] = field(default_factory=dict)
    foreign: list[str] = field(default_factory=list)  # results of requests other processes sent
    error: DistrsError | None = None  # fatal: results() raises it
    suspect: bool = False  # the service may have lost some of our requests
    server_complete: bool = False
    # The service lost the batch and we re-registered it: its own count may never reach ``size``
    # (results it had finished before the loss were already delivered), so poll briefly.
    degraded: bool = False
    # A request was rejected: the service will never count the batch complete, so poll briefly
    # for the others' results rather than wait out a long poll.
    short_poll: bool = False

    @property
    def path(self) -> str:
        return f"/v1/batches/{self.task}/{self.batch_id}/results"

    def locally_complete(self) -> bool:
        if self.pending:
            return False
        if self.size is not None and len(self.order) >= self.size:
            return True
        return self.server_complete

    def ordered(self) -> list[RewardResult]:
        ids = [i for i in self.order if i in self.results] + self.foreign
        return [self.results[i] for i in ids]

    def reject(self, request_id: str, exc: APIError) -> None:
        """End a request the service refused as ``invalid``, its error in the detail."""
        self.pending.pop(request_id, None)
        self.short_poll = True
        err = {"code": exc.code, "message": exc.message, "details": exc.details, "http_status": exc.status}
        self.results[request_id] = RewardResult(request_id, "invalid", 0.0, {"error": err})

    def merge(self, body: Any) -> bool:
        """Fold a results page into the batch; True when it brought a new result."""
        if not isinstance(body, dict):
            return False
        new = False
        for raw in body.get("results") or ():
            if not isinstance(raw, dict) or "request_id" not in raw:
                continue
            rid = str(raw["request_id"])
            if rid in self.results:
                continue
            self.results[rid] = RewardResult.from_json(raw)
            new = True
            if self.pending.pop(rid, None) is None and rid not in self.order:
                self.foreign.append(rid)
        self.server_complete = bool(body.get("complete"))
        return new


@dataclass
class Waiter:
    """A caller waiting until the flusher has handled ``target`` submissions; the errors seen."""

    target: int
    future: asyncio.Future[list[DistrsError]]
    errors: list[DistrsError] = field(default_factory=list)
