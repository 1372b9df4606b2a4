"""Per-worker credentials over HTTP (``proxy/credentials.py`` says why and how they are built).

``POST /v1/workers/credential`` ``{worker_id}``: with the deployment's shared worker token (or an
admin's), a new credential for that worker, a new session; with the worker's own credential, the
same session renewed (a credential may renew only itself). ``DELETE
/v1/workers/{worker_id}/credential`` (admin): revoke every credential that worker holds now.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel

from distrs.proxy import body as json_body
from distrs.proxy.auth import Role
from distrs.proxy.credentials import CredentialError
from distrs.proxy.deps import authorize, bound_worker
from distrs.proxy.responses import JSONResponse
from distrs.proxy.schemas import ID_PATTERN, ID_RULE, CredentialRequest


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


router = APIRouter(prefix="/v1/workers", tags=["worker"])
WorkerPath = Path(pattern=ID_PATTERN, description=f"Worker id ({ID_RULE}).")


@router.post("/credential", openapi_extra=_body_doc(CredentialRequest))
async def credential(request: Request) -> JSONResponse:
    """Exchange the shared worker token for a credential of this worker's own, or renew one."""
    st, who = authorize(request, Role.WORKER)
    body = json_body.parse(await request.body(), CredentialRequest)
    bound_worker(who, body.worker_id)
    now = st.clock()
    renew = None
    if who.holder is not None:  # the worker's own credential: renew its session
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        try:
            renew = st.credentials.verify(token, now)
        except CredentialError:  # authorize() just verified it; a race with a revoke lands here
            renew = None
    token, cred = st.credentials.issue(body.worker_id, now, renew)
    ttl = st.credentials.ttl_s
    return JSONResponse(
        {
            "credential": token,
            "worker_id": cred.worker_id,
            "expires_at": cred.expires,
            "ttl_s": ttl,
            "renew_s": ttl / 2,
        },
        status_code=200 if renew is not None else 201,
    )


@router.delete("/{worker_id}/credential")
async def revoke(request: Request, worker_id: str = WorkerPath) -> JSONResponse:
    """Refuse every credential of ``worker_id`` issued until now (admin)."""
    st, _ = authorize(request, Role.ADMIN)
    st.credentials.revoke(worker_id, st.clock())
    return JSONResponse({"worker_id": worker_id, "revoked": True})
