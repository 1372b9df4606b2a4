"""The pull loop against a fake of our own ProxyClient wrapper (never of the HTTP library)."""

from __future__ import annotations

import threading
from typing import Any

from distrs.core.model import Status
from distrs.core.pipeline_config import load_pipelines
from distrs.rewards.base import StageInput, StageOutput
from distrs.worker.loop import Worker
from distrs.worker.proxy_client import LeaseRejected, ProxyUnavailable


class FakeProxy:
    def __init__(self, leases: list[dict[str, Any]]) -> None:
        self.leases = leases
        self.completed: list[tuple[str, dict[str, Any]]] = []
        self.heartbeats: list[str] = []
        self.fail_complete: list[Exception] = []
        self.released: list[tuple[str, str]] = []
        self.on_lease: Any = None  # called while the long-poll "waits"

    def lease(self, stage: str, worker_id: str, wait_s: float) -> dict[str, Any] | None:
        if self.on_lease is not None:
            self.on_lease()
        return self.leases.pop(0) if self.leases else None

    def release(self, lease_id: str, worker_id: str) -> None:
        self.released.append((lease_id, worker_id))

    def heartbeat(self, lease_id: str, worker_id: str) -> None:
        self.heartbeats.append(lease_id)

    def complete(self, lease_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail_complete:
            raise self.fail_complete.pop(0)
        self.completed.append((lease_id, body))
        return {}

    def close(self) -> None:
        return None


def lease(i: int, reward_type: str = "synthetic", payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "lease_id": f"L{i}",
        "request_id": f"r{i}",
        "task": "t",
        "batch_id": "b",
        "reward_type": reward_type,
        "stage": "compile",
        "payload": payload or {"durations": {"compile": 0.01, "execute": 0.01}},
        "artifacts": {},
        "deadline": 0,
        "attempt": 1,
    }


class Handler:
    def __init__(
        self,
        out: StageOutput | Exception,
        ready: tuple[bool, str] = (True, ""),
        gate: threading.Event | None = None,
    ) -> None:
        self.out, self._ready, self.gate = out, ready, gate
        self.seen: list[StageInput] = []

    def ready(self) -> tuple[bool, str]:
        return self._ready

    def run(self, inp: StageInput) -> StageOutput:
        self.seen.append(inp)
        if self.gate:
            self.gate.wait(5)
        if isinstance(self.out, Exception):
            raise self.out
        return self.out


def make(proxy: FakeProxy, handler: Handler, types: list[str] | None = None, **kw: Any) -> Worker:
    return Worker(
        "compile",
        proxy,
        load_pipelines(),
        worker_id="w1",
        reward_types=types or ["synthetic"],
        handler_for=lambda t, s: handler,
        **kw,
    )


def test_run_once_reports_next_with_artifacts_and_timeout_from_stage() -> None:
    proxy = FakeProxy([lease(1)])
    h = Handler(StageOutput.next({"bin": "QUJD"}))
    w = make(proxy, h)
    assert w.run_once() is True
    ((lid, body),) = proxy.completed
    assert lid == "L1" and body["outcome"] == "next" and body["artifacts"] == {"bin": "QUJD"}
    assert h.seen[0].timeout_s == 120.0  # the compile stage's timeout from the pipeline table
    assert w.run_once() is False


def test_handler_exception_is_internal_error_not_models_fault() -> None:
    proxy = FakeProxy([lease(1)])
    w = make(proxy, Handler(RuntimeError("boom")))
    w.run_once()
    body = proxy.completed[0][1]
    assert (
        body["result"]["status"] == Status.INTERNAL_ERROR.value
        and "boom" in body["result"]["detail"]["error"]
    )


def test_unserved_reward_type_ends_internal_error_with_reason() -> None:
    proxy = FakeProxy([lease(1, reward_type="cpp")])
    w = make(proxy, Handler(StageOutput.next()), types=["synthetic"])
    w.run_once()
    body = proxy.completed[0][1]
    assert (
        body["result"]["status"] == "internal_error"
        and "cannot serve 'cpp'" in body["result"]["detail"]["error"]
    )


def test_not_ready_handler_makes_worker_not_ready() -> None:
    w = make(FakeProxy([]), Handler(StageOutput.next(), ready=(False, "no GPU")))
    ok, why = w.readiness()
    assert not ok and "no GPU" in why


def test_heartbeats_while_running_and_stop_after() -> None:
    gate = threading.Event()
    proxy = FakeProxy([lease(1)])
    w = make(proxy, Handler(StageOutput.final(Status.OK, 1.0), gate=gate), heartbeat_s=0.02)
    t = threading.Thread(target=w.run_once)
    t.start()
    threading.Event().wait(0.2)
    assert w.busy and len(proxy.heartbeats) >= 3
    gate.set()
    t.join(5)
    n = len(proxy.heartbeats)
    threading.Event().wait(0.1)
    assert len(proxy.heartbeats) == n and proxy.completed[0][1]["result"]["status"] == "ok"


def test_drain_finishes_current_lease_and_takes_no_new_one() -> None:
    gate = threading.Event()
    proxy = FakeProxy([lease(1), lease(2)])
    w = make(proxy, Handler(StageOutput.final(Status.OK, 1.0), gate=gate))
    t = threading.Thread(target=w.run)
    t.start()
    threading.Event().wait(0.1)
    w.request_drain()
    gate.set()
    t.join(5)
    assert not t.is_alive()
    assert [lid for lid, _ in proxy.completed] == ["L1"] and len(proxy.leases) == 1
    assert w.readiness() == (False, "draining")


def test_work_handed_out_after_a_drain_request_is_given_back_unrun() -> None:
    # The drain comes while the worker waits in its long-poll, which then returns a lease.
    proxy = FakeProxy([lease(1), lease(2)])
    h = Handler(StageOutput.final(Status.OK, 1.0))
    w = make(proxy, h)
    proxy.on_lease = w.request_drain
    t = threading.Thread(target=w.run)
    t.start()
    t.join(5)
    assert not t.is_alive()
    assert proxy.released == [("L1", "w1")] and proxy.completed == [] and h.seen == []
    assert w.stats.released == 1 and len(proxy.leases) == 1


def test_complete_retries_when_proxy_unavailable_and_gives_up_on_rejection() -> None:
    proxy = FakeProxy([lease(1), lease(2)])
    proxy.fail_complete = [ProxyUnavailable("down"), ProxyUnavailable("down")]
    w = make(proxy, Handler(StageOutput.final(Status.OK, 1.0)))
    w.run_once()
    assert [lid for lid, _ in proxy.completed] == ["L1"]
    proxy.fail_complete = [LeaseRejected(409, "expired")]
    w.run_once()
    assert w.stats.rejected == 1 and len(proxy.completed) == 1
