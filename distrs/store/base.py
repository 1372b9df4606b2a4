"""The QueueStore protocol: everything the proxy and planner keep, behind one small interface.

Two implementations pass one conformance suite (tests/integration/store/test_store_conformance.py):
``memory`` (one process, the embedded default) and ``redis`` (production; atomic Lua scripts).
Both are composed the same way, of batch, lease, result and usage parts (``store/composed.py``).

Semantics every implementation must keep:

* ``submit`` is idempotent per (task, request_id): a resubmission is reported as a duplicate and
  never enqueued twice. A request carries its whole route (the stages it visits, in order,
  decided once by the proxy) and enters the queue of the first.
* Queues are per stage and ordered by ``core.priority.sort_key``: EBF (estimated completion T of
  the batch, then arrival order) or FCFS.
* ``lease`` hands the head of a stage queue to one worker until ``deadline``. ``complete`` either
  moves the request on to the next stage of its route (with artifacts) in the same atomic step,
  or records its final result, exactly once; ``next`` at the last stage of a route is refused
  (NoNextStage) and changes nothing.
  ``requeue_expired`` puts expired leases back at the head of their batch's order; after
  ``max_attempts`` the request ends ``internal_error``.
* ``store_route`` stores a request's route only where it has none stored (a request of a release
  that kept its first stage only; docs/store.md, "Upgrading from a release without stored
  routes"), in one atomic step, and never replaces a route.
* Fencing: a lease is usable only by its holder (the credential that took it) and only while it is
  live. An expired lease is refused (LeaseExpired) even before ``requeue_expired`` has run, and a
  requeued or finished one is unknown, so a late heartbeat or completion from an old holder can
  never overwrite the work of the request's next holder.
* Bundles: ``lease_many`` takes up to k heads of a stage queue in queue order in one call, each
  as its own lease (own id, deadline, attempt count); ``heartbeat_many`` and ``complete_many``
  act on several leases in one call and answer per lease: one refused lease (expired, unknown,
  another holder's) never keeps the others from landing. Expiry, release, ``max_attempts`` and
  fencing are the single lease's, per request.
* When the last request of a batch ends, the batch is complete: its profile joins the task's
  history (last K batches) and a ``batch_completed`` event is appended.
* Usage per tenant (``tenant_usage``): requests submitted but not finished, and the JSON bytes of
  finished results still kept (they leave with their batch after ``result_ttl_s``). The proxy
  enforces quotas on it; an implementation may count approximately on the fast path, but with
  ``exact=True`` it recounts from the records themselves, and a quota refusal is decided only
  on an exact count (docs/store.md, "Quotas per tenant").
* All times are passed in (``now``); the store never reads a clock for decisions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field

from distrs.core.history import BatchProfile
from distrs.core.model import BatchInfo, Completion, Lease, RequestRecord, RequestState, Result
from distrs.store.errors import StoreError


class NewRequest(BaseModel):
    """A request as submitted, already validated and routed by the proxy."""

    tenant: str = "default"
    task: str
    batch_id: str
    request_id: str
    reward_type: str
    # the stages it visits, in order (``rewards.routing.route``); it is queued at the first
    route: list[str] = Field(min_length=1)
    payload: dict[str, Any]

    @property
    def first_stage(self) -> str:
        return self.route[0]


class SubmitOutcome(BaseModel):
    accepted: list[str] = Field(default_factory=list)
    duplicates: list[str] = Field(default_factory=list)


class Event(BaseModel):
    """Planner input: batch_registered | first_arrival | batch_completed | lease_expired."""

    id: str
    type: str
    ts: float
    task: str = ""
    batch_id: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class BatchLive(BaseModel):
    """One active batch as the planner sees it (Alg. 2 inputs)."""

    batch: BatchInfo
    queued: dict[str, int] = Field(default_factory=dict)
    queued_since: dict[str, list[float]] = Field(default_factory=dict)
    running_elapsed: dict[str, list[float]] = Field(default_factory=dict)
    # s_j per stage of up to FINISHED_SAMPLE of the batch's finished requests (a sample), filled
    # only for the reward types a snapshot asks for (``QueueStore.snapshot``).
    finished: list[dict[str, float]] = Field(default_factory=list)


class Snapshot(BaseModel):
    """Live state: active batches, queue depth per stage, running leases per stage."""

    now: float
    batches: list[BatchLive] = Field(default_factory=list)
    queue_depth: dict[str, int] = Field(default_factory=dict)
    running: dict[str, int] = Field(default_factory=dict)
    # Worker ids holding a lease, per stage (scale-down removes idle workers first).
    busy_workers: dict[str, list[str]] = Field(default_factory=dict)


_QUEUED = RequestState.QUEUED  # an enum member looked up once: this is on every completion


class CompleteOutcome(BaseModel):
    request: RequestRecord
    batch_completed: bool = False

    @property
    def next_stage(self) -> str | None:
        """The stage the completion moved the request on to (None when it finished)."""
        return self.request.stage if self.request.state is _QUEUED else None


class TenantUsage(BaseModel):
    """What one tenant holds in the store (``QueueStore.tenant_usage``)."""

    queued: int = 0  # submitted, not yet finished (queued or running)
    result_bytes: int = 0  # JSON bytes of its finished results still kept
    # when the earliest of its kept results expires (None: none will before its batch completes)
    next_expiry: float | None = None


class QueueStore(Protocol):
    """Durable queues, leases, results, history and events. See the module docstring."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool: ...

    async def register_batch(self, batch: BatchInfo, now: float) -> tuple[BatchInfo, bool]:
        """Create the batch (returns it and True) or return the existing identical one (False).

        Raises BatchConflict if it exists with another size or reward type, and UnknownBatch if the
        task belongs to another tenant (never reveal another tenant's task).
        """
        ...

    async def get_batch(self, task: str, batch_id: str) -> BatchInfo | None: ...

    async def submit(self, requests: list[NewRequest], now: float) -> SubmitOutcome:
        """Enqueue new requests; duplicates by (task, request_id) are reported, never re-run.

        Raises UnknownBatch when a batch is not registered (or is another tenant's) and BatchFull
        when a batch would exceed its declared size; then nothing of the call is enqueued.
        """
        ...

    async def lease(
        self, stage: str, worker_id: str, now: float, ttl_s: float, holder: str | None = None
    ) -> Lease | None:
        """Take the head of ``stage``'s queue, or None when it is empty. Never blocks.

        ``holder`` is the identity of the credential taking the lease (``worker_id`` when None);
        heartbeat, complete and release accept only that holder (LeaseNotYours otherwise)."""
        ...

    async def wait_for_work(self, stage: str, timeout_s: float) -> None:
        """Return when work may have arrived for ``stage`` (or after ``timeout_s``)."""
        ...

    async def get_lease(self, lease_id: str) -> Lease | None:
        """The live lease with this id (expired but not yet requeued ones included), or None."""
        ...

    async def heartbeat(self, lease_id: str, holder: str, now: float, ttl_s: float) -> float:
        """Extend a live lease; returns the new deadline. UnknownLease/LeaseNotYours/LeaseExpired."""
        ...

    async def complete(self, item: Completion, holder: str, now: float) -> CompleteOutcome:
        """Finish a lease: move on to the next stage of the request's route (``next``, with
        artifacts) or record the result (``final``). NoNextStage for ``next`` at its last stage."""
        ...

    async def lease_many(
        self, stage: str, worker_id: str, now: float, ttl_s: float, k: int, holder: str | None = None
    ) -> list[Lease]:
        """Take up to ``k`` heads of ``stage``'s queue in queue order (EBF, FCFS within a batch),
        each as its own lease; an empty list when the queue is empty. Never blocks."""
        ...

    async def heartbeat_many(
        self, lease_ids: Sequence[str], holder: str, now: float, ttl_s: float
    ) -> list[float | StoreError]:
        """Extend several leases; per lease its new deadline or the error ``heartbeat`` raises."""
        ...

    async def complete_many(
        self, items: Sequence[Completion], holder: str, now: float
    ) -> list[CompleteOutcome | StoreError]:
        """Finish several leases in one transition; per lease its outcome or the error
        ``complete`` raises for it (the others land regardless)."""
        ...

    async def release(self, lease_id: str, holder: str, now: float) -> str:
        """Give a live lease back unworked: the request returns to its place in the stage queue
        and the attempt does not count; returns the stage. A worker told to stop while it was
        waiting for work may still be handed a request; it gives it back instead of running it."""
        ...

    async def requeue_expired(self, now: float, max_attempts: int) -> list[tuple[str, str]]:
        """Requeue every lease past its deadline; returns (request id, stage) of each."""
        ...

    async def get_request(self, task: str, request_id: str) -> RequestRecord | None: ...

    async def store_route(self, task: str, request_id: str, route: Sequence[str]) -> bool:
        """Keep ``route`` as the request's route if none is stored with it: True when stored;
        False when the request keeps one already or is unknown (nothing changed). A route of one
        stage is stored as none (the request's current stage is all of it), so it is never
        stored here. For the requests of a release that stored their first stage only
        (docs/store.md, "Upgrading from a release without stored routes")."""
        ...

    async def batch_results(self, task: str, batch_id: str) -> list[Result]:
        """Finished results of a batch in submission order."""
        ...

    async def wait_batch(
        self, task: str, batch_id: str, timeout_s: float, until_complete: bool = False
    ) -> None:
        """Return when a result of the batch may have landed (or after ``timeout_s``); with
        ``until_complete``, only when the batch may have completed (a caller that waits for the
        whole batch is not woken, and does not read the batch again, for each of its results)."""
        ...

    async def history(self, task: str) -> list[BatchProfile]:
        """The task's last K finished batch profiles, oldest first."""
        ...

    async def events(self, after: str, timeout_s: float, count: int = 100) -> list[Event]:
        """Events after id ``after`` ("0" for all), waiting up to ``timeout_s`` for one."""
        ...

    async def tenant_usage(self, tenant: str, now: float, exact: bool = False) -> TenantUsage:
        """``tenant``'s usage at ``now``. Without ``exact`` it may be read from counters that a
        crash can leave off (docs/store.md, "Quotas per tenant"); with it, recounted from the records."""
        ...

    async def snapshot(self, now: float, finished_types: Collection[str] = ()) -> Snapshot:
        """Active batches with their queued and running requests. Batches of the reward types in
        ``finished_types`` also carry a sample of their finished requests' stage times, which
        only a type's first batches need (``scaling/fallback.py``); reading it for every batch
        at every decision would cost one sample of up to FINISHED_SAMPLE profiles per batch."""
        ...
