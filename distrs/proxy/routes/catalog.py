"""``GET /v1/reward-types``: what this service can score.

Trainer adapters ask once and then keep rows of an unknown reward type out of their batches (a
row the service cannot score costs nothing instead of failing or stalling the whole batch).
Answers ``{"reward_types": {NAME: {"stages": [...]}}}`` for the table the proxy serves.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from distrs.proxy.auth import Role
from distrs.proxy.deps import authorize

router = APIRouter(prefix="/v1", tags=["trainer"])


@router.get("/reward-types")
async def reward_types(request: Request) -> dict[str, Any]:
    """Every served reward type and the stages it visits."""
    st, _ = authorize(request, Role.TRAINER)
    return {
        "reward_types": {
            name: {"stages": list(rt.stages)} for name, rt in sorted(st.table.reward_types.items())
        }
    }
