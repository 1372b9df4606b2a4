"""Every Redis key of the session store, and how records are written into Redis hashes.

Layout (``ns`` the store's namespace; ``{...}`` a Redis Cluster hash tag, so every key of one
session lives in one slot and each script touches one slot only)::

    {ns:ses:SID}              hash  SessionRecord fields (limits as JSON)
    {ns:ses:SID}:op:OP        hash  SessionOp fields (body, result, error as JSON); ``run_s`` its
                                    deadline past the start; expires closed_ttl_s after its answer
    {ns:ses:SID}:pending      list  the session's calls not answered yet, in order
    {ns:ses:SID}:ops          set   every call id of the session (forgotten with it)
    {ns:sw:WID}:q             list  call ids queued for worker WID
    {ns:sw:WID}:held          set   the sessions worker WID holds (its room)
    {ns:ses}:all              set   every session not yet forgotten (sweep, stats)
    {ns:ses}:creates          list  create call ids no worker has taken yet
    {ns:ses}:workers          hash  worker id -> WorkerView JSON (its latest poll)
    {ns:ses}:tenants          set   tenants with sessions
    {ns:ses:tenant:N}:open    zset  tenant N's sessions not closed (its quota), by creation time
    {ns:ses}:wake             channel  "w WID" | "c" | "o OP": wake-ups for long-polls

An op id is ``SID.SUFFIX``, so a worker's report (op ids only) finds its session's slot.
"""

from __future__ import annotations

import orjson

from distrs.core.sessions import OpKind, OpState, SessionOp, SessionRecord


def session_of(op_id: str) -> str:
    """The session id of an op id (``SID.SUFFIX``)."""
    return op_id.split(".", 1)[0]


class SessionKeys:
    def __init__(self, ns: str = "distrs") -> None:
        self.ns = ns

    def rec(self, sid: str) -> str:
        return f"{{{self.ns}:ses:{sid}}}"

    def op(self, op_id: str) -> str:
        return f"{self.rec(session_of(op_id))}:op:{op_id}"

    def op_prefix(self, sid: str) -> str:
        return f"{self.rec(sid)}:op:"

    def pending(self, sid: str) -> str:
        return f"{self.rec(sid)}:pending"

    def ops(self, sid: str) -> str:
        return f"{self.rec(sid)}:ops"

    def queue(self, worker_id: str) -> str:
        return f"{{{self.ns}:sw:{worker_id}}}:q"

    def held(self, worker_id: str) -> str:
        return f"{{{self.ns}:sw:{worker_id}}}:held"

    def all(self) -> str:
        return f"{{{self.ns}:ses}}:all"

    def creates(self) -> str:
        return f"{{{self.ns}:ses}}:creates"

    def workers(self) -> str:
        return f"{{{self.ns}:ses}}:workers"

    def tenants(self) -> str:
        return f"{{{self.ns}:ses}}:tenants"

    def tenant_open(self, tenant: str) -> str:
        return f"{{{self.ns}:ses:tenant:{tenant}}}:open"

    def wake(self) -> str:
        return f"{{{self.ns}:ses}}:wake"


def _s(v: object) -> str:
    return "" if v is None else str(v)


def rec_fields(rec: SessionRecord) -> dict[str, str]:
    d = rec.model_dump(mode="json", exclude={"limits"})
    out = {k: _s(v) for k, v in d.items()}
    out["limits"] = rec.limits.model_dump_json()
    return out


def rec_from(h: dict[str, str]) -> SessionRecord:
    d: dict[str, object] = {k: (v if v != "" else None) for k, v in h.items()}
    d["limits"] = orjson.loads(h["limits"])
    d["detail"] = h.get("detail", "")
    return SessionRecord.model_validate(d)


def op_fields(op: SessionOp, run_s: float) -> dict[str, str]:
    return {
        "op_id": op.op_id,
        "session_id": op.session_id,
        "kind": op.kind.value,
        "body": body_json(op.body),
        "state": op.state.value,
        "worker_id": _s(op.worker_id),
        "holder": _s(op.holder),
        "created_at": repr(op.created_at),
        "started_at": _s(op.started_at),
        "deadline": _s(op.deadline),
        "run_s": repr(run_s),
        "result": "" if op.result is None else orjson.dumps(op.result).decode(),
        "error": "" if op.error is None else orjson.dumps(op.error).decode(),
    }


def op_from(h: dict[str, str]) -> SessionOp:
    def num(k: str) -> float | None:
        return float(h[k]) if h.get(k) else None

    return SessionOp(
        op_id=h["op_id"],
        session_id=h["session_id"],
        kind=OpKind(h["kind"]),
        body=orjson.loads(h["body"]),
        state=OpState(h["state"]),
        worker_id=h.get("worker_id") or None,
        holder=h.get("holder") or None,
        created_at=float(h["created_at"]),
        started_at=num("started_at"),
        deadline=num("deadline"),
        result=orjson.loads(h["result"]) if h.get("result") else None,
        error=orjson.loads(h["error"]) if h.get("error") else None,
    )


def body_json(body: dict[str, object]) -> str:
    """A call's body as canonical JSON: an idempotent resubmission compares equal."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
