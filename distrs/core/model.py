"""The records the service keeps: batches, requests, stage records, results, leases.

They are pydantic models because they cross process boundaries (HTTP, Redis) as JSON; the store
serialises them with ``model_dump_json`` and reads them back with ``model_validate_json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Status(StrEnum):
    """Final status of a reward request (DESIGN.md, HTTP API)."""

    OK = "ok"
    WRONG_ANSWER = "wrong_answer"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT_EXCEEDED = "memory_limit_exceeded"
    INVALID = "invalid"
    INTERNAL_ERROR = "internal_error"


class RequestState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class StageRecord(BaseModel):
    """What happened to one request at one stage."""

    name: str
    worker: str = ""
    queued_s: float = 0.0
    run_s: float = 0.0
    outcome: str = ""


class Result(BaseModel):
    """The final answer for one request."""

    request_id: str
    status: Status
    score: float = 0.0
    detail: dict[str, Any] = Field(default_factory=dict)
    stages: list[StageRecord] = Field(default_factory=list)


class BatchInfo(BaseModel):
    """A batch registration: the unit a trainer waits on."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = "default"
    task: str
    batch_id: str
    size: int
    reward_type: str | None = None
    rollout_started_at: float | None = None
    registered_at: float = 0.0
    first_arrival_at: float | None = None
    completed_at: float | None = None
    # Estimated earliest completion T of the batch (Eq. 1-2), the EBF priority; set by the store.
    estimated_completion: float | None = None
    submitted: int = 0
    done: int = 0
    # Measured after completion: T from the requests' own r_i and s_ij (Eq. 1-2), and d = actual - T.
    earliest_completion: float | None = None
    extra_delay_s: float | None = None

    @property
    def anchor(self) -> float:
        """Time the batch's r_i are measured from: the rollout-start hint, else registration."""
        return self.rollout_started_at if self.rollout_started_at is not None else self.registered_at

    @property
    def complete(self) -> bool:
        return self.completed_at is not None


class RequestRecord(BaseModel):
    """One reward request as the store keeps it."""

    tenant: str = "default"
    task: str
    batch_id: str
    request_id: str
    reward_type: str
    payload: dict[str, Any]
    arrived_at: float
    state: RequestState = RequestState.QUEUED
    stage: str
    stage_enqueued_at: float
    attempts: int = 0
    artifacts: dict[str, str] = Field(default_factory=dict)
    stages: list[StageRecord] = Field(default_factory=list)
    result: Result | None = None
    seq: int = 0
    # The stages it visits, in order: decided once, at submit (``rewards.routing.route``).
    route: list[str] = Field(default_factory=list)


class Lease(BaseModel):
    """A worker's exclusive claim on one request at one stage until ``deadline``.

    ``holder`` is the identity of the credential that took the lease (the proxy derives it from
    the caller's token): only the same holder may heartbeat, complete or release it.
    ``worker_id`` is what the worker calls itself, kept for display in stage records.
    """

    lease_id: str
    request_id: str
    task: str
    batch_id: str
    reward_type: str
    stage: str
    worker_id: str
    holder: str = ""
    payload: dict[str, Any]
    artifacts: dict[str, str] = Field(default_factory=dict)
    deadline: float
    attempt: int = 1
    started_at: float = 0.0


@dataclass(slots=True)
class Completion:
    """One finished lease as its worker reports it: the argument of the store's ``complete``.

    ``next`` moves the request on to the stage after this one on its route (decided at submit
    and kept by the store, so a completion names no stage), handing it ``artifacts`` (None keeps
    those it has); ``final`` records ``result`` (None records ``internal_error``). A plain
    record, checked where it is made (the proxy validates the worker's body): one is made per
    completion, on the hottest path."""

    lease_id: str
    outcome: Literal["next", "final"] = "final"
    run_s: float = 0.0
    artifacts: dict[str, str] | None = None
    result: Result | None = None
