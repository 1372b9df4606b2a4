"""An in-memory stand-in for the service behind the client's Transport protocol.

It keeps just enough of API v1 - batches, idempotent requests, results in submission order - to
test the client's own logic; failures are injected per call. The real service is exercised by the
live tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distrs_client.errors import ServiceUnavailableError
from distrs_client.transport import Response

Fault = Callable[[str, str, Any], Response | None]


@dataclass
class FakeService:
    batches: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    order: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    params: list[tuple[str, str, Any]] = field(default_factory=list)
    # Each fault is consulted in turn; returning a Response (or raising) short-circuits the call.
    faults: list[Fault] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)  # request_id -> times "executed"
    reverse_results: bool = False
    hold: bool = False  # when True nothing finishes

    async def request(self, method: str, path: str, *, body: Any = None, **options: Any) -> Response:
        """Answer from the in-memory state; query parameters (recorded in ``params``) and
        timeouts play no part here."""
        self.calls.append((method, path, body))
        self.params.append((method, path, options.get("params")))
        while self.faults:
            fault = self.faults.pop(0)
            resp = fault(method, path, body)
            if resp is not None:
                return resp
            break
        if method == "POST" and path == "/v1/batches":
            key = (body["task"], body["batch_id"])
            if key in self.batches:
                if self.batches[key]["size"] != body["size"]:
                    return _err(409, "batch_conflict", "size differs")
                return Response(200, self.batches[key])
            self.batches[key] = dict(body)
            self.order[key] = []
            return Response(201, body)
        if method == "POST" and path == "/v1/requests":
            items = body["requests"]
            for it in items:
                if (it["task"], it["batch_id"]) not in self.batches:
                    return _err(404, "unknown_batch", f"batch {it['batch_id']} not found")
                if "bad" in it["payload"]:
                    return _err(422, "invalid_request", "requests.0.payload: bad", field="payload")
            acc, dup = [], []
            for it in items:
                k = (it["task"], it["request_id"])
                if k in self.requests:
                    dup.append(it["request_id"])
                    continue
                self.requests[k] = it
                self.order[(it["task"], it["batch_id"])].append(it["request_id"])
                self.runs[it["request_id"]] = self.runs.get(it["request_id"], 0) + 1
                acc.append(it["request_id"])
            return Response(202, {"accepted": len(acc), "duplicates": len(dup)})
        if method == "GET" and path.endswith("/results"):
            _, _, _, task, batch_id, _ = path.split("/")
            key = (task, batch_id)
            if key not in self.batches:
                return _err(404, "unknown_batch", "not found")
            ids = [] if self.hold else list(self.order[key])
            res = [
                {
                    "request_id": i,
                    "status": self.requests[(task, i)]["payload"].get("status", "ok"),
                    "score": float(self.requests[(task, i)]["payload"].get("score", 1.0)),
                    "detail": self.requests[(task, i)]["payload"].get("detail", {}),
                    "stages": [],
                }
                for i in ids
            ]
            if self.reverse_results:
                res.reverse()
            complete = len(ids) >= self.batches[key]["size"]
            return Response(200, {"complete": complete, "results": res})
        if method == "GET" and path.startswith("/v1/requests/"):
            _, _, _, task, rid = path.split("/")
            if (task, rid) not in self.requests:
                return _err(404, "unknown_request", "not found")
            return Response(200, {"request_id": rid, "state": "done"})
        return _err(404, "not_found", path)

    async def aclose(self) -> None:
        pass

    def lose_everything(self) -> None:
        """What a restart of a memory-store proxy does."""
        self.batches.clear()
        self.requests.clear()
        self.order.clear()

    def posted_ids(self) -> list[str]:
        return [it["request_id"] for m, p, b in self.calls if p == "/v1/requests" for it in b["requests"]]


def _err(status: int, code: str, message: str, **details: Any) -> Response:
    return Response(status, {"error": {"code": code, "message": message, "details": details}})


def status_once(status: int, headers: dict[str, str] | None = None, path: str | None = None) -> Fault:
    def fault(method: str, p: str, body: Any) -> Response | None:
        if path is not None and p != path:
            return None
        return Response(status, {"error": {"code": "x", "message": "injected"}}, headers or {})

    return fault


def down_once(method: str, path: str, body: Any) -> Response | None:
    raise ServiceUnavailableError("connection refused (injected)")
