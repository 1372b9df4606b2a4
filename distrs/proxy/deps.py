"""Shared application state and FastAPI dependencies (auth, tenant, state, clock).

``AppState`` is built once in ``create_app`` and stored on ``app.state.distrs``; routes reach it
through ``get_state``. The clock is injectable so tests can drive time. ``act_as`` resolves the
tenant a call works for: the token's own, or for an admin any tenant named by ``?tenant=``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from distrs.config import ProxySettings
from distrs.core.stages import PipelineTable
from distrs.metrics import Metrics
from distrs.proxy.auth import INSECURE, TENANT_PATTERN, Principal, Role, TokenTable
from distrs.proxy.credentials import CredentialError, CredentialIssuer, is_credential
from distrs.proxy.errors import ApiError
from distrs.store.base import QueueStore


@dataclass
class AppState:
    settings: ProxySettings
    store: QueueStore
    table: PipelineTable
    metrics: Metrics
    tokens: TokenTable
    credentials: CredentialIssuer
    clock: Callable[[], float] = time.time
    # worker_id -> (stage, last seen) for /v1/stats
    workers: dict[str, tuple[str, float]] = field(default_factory=dict)
    # Set by an in-process planner (``distrs up``): returns its latest plan for /v1/stats.
    plan_view: Callable[[], dict[str, Any] | None] | None = None


async def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.distrs
    return state


def authenticate(request: Request, state: AppState) -> Principal:
    """The caller's principal from its bearer token (every caller is admin under --insecure)."""
    if state.settings.insecure:
        return INSECURE
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer TOKEN)")
    token = token.strip()
    if is_credential(token):
        try:
            cred = state.credentials.verify(token, state.clock())
        except CredentialError as exc:
            raise ApiError(401, exc.code, exc.message) from None
        return Principal(Role.WORKER, "default", worker_id=cred.worker_id, holder=cred.holder)
    p = state.tokens.lookup(token)
    if p is None:
        raise ApiError(401, "unauthorized", "unknown token")
    return p


def bound_worker(p: Principal, worker_id: str) -> None:
    """A worker's own credential speaks for its worker id only (403 naming ``worker_id``)."""
    if p.worker_id is not None and worker_id != p.worker_id:
        raise ApiError(
            403,
            "forbidden",
            f"worker_id: this credential is bound to worker {p.worker_id!r}, not {worker_id!r}",
            field="worker_id",
        )


def authorize(request: Request, *roles: Role) -> tuple[AppState, Principal]:
    """State and principal for a route that needs one of ``roles`` (admin always passes).

    Hot routes call this directly instead of declaring dependencies: FastAPI's dependency
    resolution costs more per request than the route's own work.
    """
    state: AppState = request.app.state.distrs
    p = authenticate(request, state)
    if p.role is not Role.ADMIN and p.role not in roles:
        names = ", ".join(sorted({r.value for r in roles} | {Role.ADMIN.value}))
        raise ApiError(403, "forbidden", f"this endpoint needs role {names}; token has {p.role.value}")
    return state, p


def act_as(who: Principal, tenant: str | None) -> Principal:
    """``who``, or for an admin naming ``tenant`` (``?tenant=``), an admin of that tenant.

    A trainer may only name its own tenant (403 otherwise), so it can never reach another
    tenant's tasks however it spells them."""
    if tenant is None or tenant == who.tenant:
        return who
    if not TENANT_PATTERN.match(tenant):
        raise ApiError(422, "invalid_request", f"tenant: must match {TENANT_PATTERN.pattern}", field="tenant")
    if who.role is not Role.ADMIN:
        raise ApiError(
            403, "forbidden", "tenant: only an admin token may act for another tenant", field="tenant"
        )
    return Principal(Role.ADMIN, tenant)


def require(*roles: Role) -> Callable[..., Awaitable[Principal]]:
    async def dep(request: Request) -> Principal:
        return act_as(authorize(request, *roles)[1], request.query_params.get("tenant"))

    return dep


trainer = require(Role.TRAINER)
worker = require(Role.WORKER)
admin = require()
