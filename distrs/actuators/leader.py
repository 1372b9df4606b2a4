"""Leader election over a ``coordination.k8s.io/v1`` Lease, for planners run with several replicas.

Only the leader may scale workers; the others stay warm and take over when the leader stops
renewing. The rules follow Kubernetes' own lease-based election (client-go ``leaderelection``):

* a candidate that finds no Lease creates one naming itself;
* the holder renews ``renewTime`` well before ``leaseDurationSeconds`` runs out;
* a follower takes over only after it has seen the *same* Lease record, unchanged, for longer
  than the lease duration by its *own* clock, so clock skew between nodes cannot cause a
  takeover of a live leader;
* every write carries the ``resourceVersion`` it read, so of two candidates racing for an
  expired Lease exactly one wins (the other gets 409 Conflict and stays a follower);
* a leader that cannot renew for a whole lease duration stops acting as leader.

The official client ships ``kubernetes.leaderelection``, but it runs blocking loops in threads
and calls ``sys.exit`` on bad configuration; the planner is an asyncio loop that must never
crash, so the small state machine is written here, with the decision step a pure function of
the observed record and ``now`` so it is tested table-driven.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

log = logging.getLogger(__name__)

MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_microtime(t: datetime) -> str:
    """Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return t.astimezone(UTC).strftime(MICROTIME_FORMAT)


def parse_microtime(value: str | None) -> datetime | None:
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease the election reads."""

    holder: str | None
    duration_s: int
    renew_time: datetime | None
    acquire_time: datetime | None
    transitions: int
    resource_version: str | None

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        return cls(
            holder=spec.get("holderIdentity") or None,
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            renew_time=parse_microtime(spec.get("renewTime")),
            acquire_time=parse_microtime(spec.get("acquireTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=meta.get("resourceVersion"),
        )

    def fingerprint(self) -> tuple[object, ...]:
        """What must change for a follower to consider the holder alive."""
        return (self.holder, self.renew_time, self.resource_version)


class Action(StrEnum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE_OVER = "take_over"  # free or expired
    FOLLOW = "follow"  # someone else holds a live lease


def decide(
    record: LeaseRecord | None,
    identity: str,
    now: datetime,
    observed_at: datetime | None,
    duration_s: int,
) -> Action:
    """What a candidate does with the Lease it just read.

    ``observed_at`` is when this candidate first saw ``record`` unchanged (its own clock), or
    None when the record just changed. A record with no holder (released) is free at once.
    """
    if record is None:
        return Action.CREATE
    if record.holder == identity:
        return Action.RENEW
    if record.holder is None:
        return Action.TAKE_OVER
    lease_s = record.duration_s or duration_s
    if observed_at is not None and now - observed_at > timedelta(seconds=lease_s):
        return Action.TAKE_OVER
    return Action.FOLLOW


class LeaseClient(Protocol):
    """The three Lease calls the election needs (``get``, ``create``, ``update``).

    ``read`` returns None when the Lease does not exist (404); ``create`` and ``replace`` return
    None when another writer got there first (409). Any other failure raises.
    """

    async def read(self) -> dict[str, Any] | None: ...

    async def create(self, body: dict[str, Any]) -> dict[str, Any] | None: ...

    async def replace(self, body: dict[str, Any]) -> dict[str, Any] | None: ...


class LeaseElector:
    """Keeps (or waits for) leadership; call :meth:`ensure` before every action a leader takes.

    ``ensure`` talks to the API server at most once per ``renew_every_s`` while leading, so the
    planner may call it on every decision.
    """

    def __init__(
        self,
        client: LeaseClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        duration_s: int = 15,
        renew_every_s: float | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.renew_every = timedelta(seconds=renew_every_s if renew_every_s else duration_s / 3)
        self.clock = clock
        self._leading = False
        self._last_renew: datetime | None = None
        self._seen: tuple[object, ...] | None = None
        self._seen_at: datetime | None = None
        self.last_error: str | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading

    def _body(self, record: LeaseRecord | None, now: datetime, *, release: bool = False) -> dict[str, Any]:
        taking = record is None or record.holder != self.identity
        transitions = 0 if record is None else record.transitions + (1 if taking and record.holder else 0)
        acquire = now if taking or record is None or record.acquire_time is None else record.acquire_time
        spec: dict[str, Any] = {
            "holderIdentity": None if release else self.identity,
            "leaseDurationSeconds": 1 if release else self.duration_s,
            "acquireTime": format_microtime(acquire),
            "renewTime": format_microtime(now),
            "leaseTransitions": transitions,
        }
        if release:
            spec.pop("holderIdentity")
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if record is not None and record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    async def ensure(self) -> bool:
        """Try to hold the Lease; True when this candidate may act as leader now."""
        now = self.clock()
        if self._leading and self._last_renew is not None and now - self._last_renew < self.renew_every:
            return True
        try:
            self._leading = await self._round(now)
            self.last_error = None
        except Exception as exc:  # any API failure: keep leadership only within the lease duration
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("leader election: %s", self.last_error)
            if self._leading and (
                self._last_renew is None or now - self._last_renew > timedelta(seconds=self.duration_s)
            ):
                log.warning("leader election: could not renew for %ss; stepping down", self.duration_s)
                self._leading = False
        return self._leading

    async def _round(self, now: datetime) -> bool:
        obj = await self.client.read()
        record = LeaseRecord.from_object(obj) if obj is not None else None
        if record is not None and record.fingerprint() != self._seen:
            self._seen, self._seen_at = record.fingerprint(), now
        action = decide(record, self.identity, now, self._seen_at if record else None, self.duration_s)
        if action is Action.FOLLOW:
            if self._leading:
                log.info("leader election: %s now holds %s", record and record.holder, self.name)
            return False
        if action is Action.CREATE:
            written = await self.client.create(self._body(None, now))
        else:
            written = await self.client.replace(self._body(record, now))
        if written is None:  # another candidate wrote first
            return False
        if not self._leading:
            log.info("leader election: %s acquired %s/%s", self.identity, self.namespace, self.name)
        self._last_renew = now
        fresh = LeaseRecord.from_object(written)
        self._seen, self._seen_at = fresh.fingerprint(), now
        return True

    async def release(self) -> None:
        """Give the Lease up (on shutdown) so a follower takes over without waiting it out."""
        if not self._leading:
            return
        self._leading = False
        try:
            obj = await self.client.read()
            if obj is None:
                return
            record = LeaseRecord.from_object(obj)
            if record.holder == self.identity:
                await self.client.replace(self._body(record, self.clock(), release=True))
        except Exception as exc:
            log.warning("leader election: release failed: %s", exc)
