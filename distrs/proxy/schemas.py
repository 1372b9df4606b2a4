"""HTTP request and response bodies of API v1 (DESIGN.md). Unknown fields are rejected (422).

Every id the API takes (task, batch, request, stage, worker, lease; path parameters and headers
included) is checked against one pattern, ``ID_PATTERN``: 1-200 characters of ASCII letters,
digits and ``. _ : @ + = -``. No ``/`` (the proxy keeps a task as ``TENANT/TASK`` in the store, so
a ``/`` inside an id would make that name ambiguous and a path unreadable), no spaces or control
characters (they would be unreadable in paths, logs and metric labels).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from distrs.core.model import Status

ID_PATTERN = r"^[A-Za-z0-9._:@+=-]{1,200}$"
ID_RULE = "1-200 characters of A-Z a-z 0-9 . _ : @ + = -"
_ID = ID_PATTERN


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchCreate(_Strict):
    task: str = Field(pattern=_ID, description="Training task (tenant-scoped) id.")
    batch_id: str = Field(pattern=_ID, description="Batch (iteration) id within the task.")
    size: int = Field(ge=1, le=1_000_000, description="How many requests the batch will hold.")
    reward_type: str | None = Field(None, description="Reward type of the batch's requests, if uniform.")
    rollout_started_at: float | None = Field(
        None,
        allow_inf_nan=False,
        description="Unix time the rollout started (the planner's warm-up hint); default now. "
        "Held to [now - DISTRS_ROLLOUT_START_SKEW_S, now].",
    )


class RequestIn(_Strict):
    task: str = Field(pattern=_ID)
    batch_id: str = Field(pattern=_ID)
    request_id: str = Field(pattern=_ID, description="Idempotency key within the task.")
    reward_type: str = Field(pattern=_ID)
    payload: dict[str, Any]


class BulkRequests(_Strict):
    requests: list[RequestIn] = Field(min_length=1)


class SubmitResponse(BaseModel):
    accepted: int
    duplicates: int
    accepted_ids: list[str] = Field(default_factory=list)
    duplicate_ids: list[str] = Field(default_factory=list)


class LeaseRequest(_Strict):
    stage: str = Field(pattern=_ID)
    worker_id: str = Field(pattern=_ID)
    wait_s: float = Field(0.0, ge=0, le=300)


class CredentialRequest(_Strict):
    worker_id: str = Field(pattern=_ID)


class HeartbeatRequest(_Strict):
    worker_id: str = Field(pattern=_ID)


class ReleaseRequest(_Strict):
    worker_id: str = Field(pattern=_ID)


class ResultIn(_Strict):
    status: Status
    score: float = Field(0.0, ge=-1e9, le=1e9)
    detail: dict[str, Any] = Field(default_factory=dict)


class CompleteRequest(_Strict):
    worker_id: str = Field(pattern=_ID)
    outcome: str = Field(pattern="^(next|final)$")
    result: ResultIn | None = None
    artifacts: dict[str, str] | None = None
    run_s: float = Field(0.0, ge=0, le=86_400)


# Most leases one bundle call may take, extend or complete (more gives 422 naming the field).
MAX_BUNDLE = 128


class LeaseBundleRequest(_Strict):
    stage: str = Field(pattern=_ID)
    worker_id: str = Field(pattern=_ID)
    wait_s: float = Field(0.0, ge=0, le=300)
    max_items: int = Field(ge=1, le=MAX_BUNDLE, description="Most requests to lease in this call (k).")


class BundleHeartbeatRequest(_Strict):
    worker_id: str = Field(pattern=_ID)
    lease_ids: list[Annotated[str, Field(pattern=_ID)]] = Field(min_length=1, max_length=MAX_BUNDLE)


class BundleCompleteItem(_Strict):
    lease_id: str = Field(pattern=_ID)
    outcome: str = Field(pattern="^(next|final)$")
    result: ResultIn | None = None
    artifacts: dict[str, str] | None = None
    run_s: float = Field(0.0, ge=0, le=86_400)


class BundleCompleteRequest(_Strict):
    worker_id: str = Field(pattern=_ID)
    items: list[BundleCompleteItem] = Field(min_length=1, max_length=MAX_BUNDLE)


class BatchResults(BaseModel):
    task: str
    batch_id: str
    size: int
    done: int
    complete: bool
    results: list[dict[str, Any]]
    extra_delay_s: float | None = None
