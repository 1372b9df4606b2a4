"""``GET /v1/reward-types``: what this service can score.

Trainer adapters ask once and then keep rows of an unknown reward type out of their batches (a
row the service cannot score costs nothing instead of failing or stalling the whole batch).
Answers ``{"reward_types": {NAME: {"stages": [...], "ready": bool, "reason"?: str}}}`` for the
table the proxy serves; ``ready`` is false for a type whose optional extra is not installed here
(``kernelbench`` without ``distrs[kernels]``), and ``reason`` names the extra.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from distrs.core.extras import missing_extra
from distrs.proxy.auth import Role
from distrs.proxy.deps import authorize

router = APIRouter(prefix="/v1", tags=["trainer"])


@router.get("/reward-types")
async def reward_types(request: Request) -> dict[str, Any]:
    """Every served reward type and the stages it visits."""
    st, _ = authorize(request, Role.TRAINER)
    out: dict[str, Any] = {}
    for name, rt in sorted(st.table.reward_types.items()):
        why = missing_extra(name)
        out[name] = {"stages": list(rt.stages), "ready": why is None, **({"reason": why} if why else {})}
    return {"reward_types": out}
