"""The pull loop against a fake of our own ProxyClient wrapper (never of the HTTP library)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from distrs.core.bundles import bundle_size
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
        self.bundle_calls: list[int] = []  # max_items of each bundle lease call
        self.bundle_heartbeats: list[list[str]] = []
        self.refuse_heartbeat: set[str] = set()
        self.refuse_complete: set[str] = set()
        self.bundle_completions: list[list[dict[str, Any]]] = []

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

    def lease_bundle(self, stage: str, worker_id: str, wait_s: float, max_items: int) -> list[dict[str, Any]]:
        if self.on_lease is not None:
            self.on_lease()
        self.bundle_calls.append(max_items)
        got, self.leases = self.leases[:max_items], self.leases[max_items:]
        return got

    def heartbeat_bundle(self, lease_ids: list[str], worker_id: str) -> set[str]:
        self.bundle_heartbeats.append(list(lease_ids))
        return self.refuse_heartbeat & set(lease_ids)

    def complete_bundle(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.bundle_completions.append(items)
        return [
            {"lease_id": it["lease_id"], "error": {"code": "lease_expired", "message": "expired"}}
            if it["lease_id"] in self.refuse_complete
            else {"lease_id": it["lease_id"], "request_id": "r", "next_stage": None, "batch_completed": False}
            for it in items
        ]

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
        clock: list[float] | None = None,
        run_s: float = 0.0,
    ) -> None:
        self.out, self._ready, self.gate = out, ready, gate
        self.seen: list[StageInput] = []
        self.clock, self.run_s = clock, run_s  # an injected clock each run moves by run_s

    def ready(self) -> tuple[bool, str]:
        return self._ready

    def run(self, inp: StageInput) -> StageOutput:
        self.seen.append(inp)
        if self.clock is not None:
            self.clock[0] += self.run_s
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
    compile_s = load_pipelines().stages["compile"].timeout_s
    assert h.seen[0].timeout_s == compile_s  # the compile stage's timeout from the pipeline table
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


class Toolless(Handler):
    """A handler whose tool this install lacks (a compile image without nvcc)."""

    def absent(self) -> str | None:
        return "no CUDA compiler"


def test_a_default_worker_leaves_out_a_type_whose_tool_is_absent(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    plain, toolless = (
        Handler(StageOutput.next()),
        Toolless(StageOutput.next(), ready=(False, "no CUDA compiler")),
    )
    w = Worker(
        "compile",
        FakeProxy([]),
        load_pipelines(),
        worker_id="w1",
        handler_for=lambda t, s: toolless if t == "cuda" else plain,
    )
    assert "cuda" not in w.reward_types and w.reward_types  # the stage's other types are served
    assert w.readiness() == (True, "")
    assert any("does not serve 'cuda'" in r.getMessage() for r in caplog.records)


def test_a_worker_told_to_serve_a_toolless_type_stays_unready() -> None:
    w = make(FakeProxy([]), Toolless(StageOutput.next(), ready=(False, "no CUDA compiler")), types=["cuda"])
    assert w.reward_types == ["cuda"]
    ok, why = w.readiness()
    assert not ok and "no CUDA compiler" in why


def test_a_not_ready_worker_logs_its_reason_once_and_takes_no_work(caplog: pytest.LogCaptureFixture) -> None:
    proxy = FakeProxy([{"lease_id": "l1"}])
    w = make(proxy, Handler(StageOutput.next(), ready=(False, "SANDBOX UNAVAILABLE: no namespaces")))
    t = threading.Thread(target=w.run, kwargs={"idle_backoff_s": 0.01})
    t.start()
    try:
        threading.Event().wait(0.3)  # about six readiness checks
    finally:
        w.request_drain()
        t.join(5)
    lines = [r for r in caplog.records if "SANDBOX UNAVAILABLE" in r.getMessage()]
    assert len(lines) == 1
    assert proxy.leases  # nothing was leased


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


def test_a_revived_worker_serves_again_with_the_same_handler() -> None:
    proxy = FakeProxy([lease(1)])
    made: list[Handler] = []

    def handler_for(t: str, s: str) -> Handler:
        made.append(Handler(StageOutput.final(Status.OK, 1.0)))
        return made[-1]

    w = Worker(
        "compile",
        proxy,
        load_pipelines(),
        worker_id="w1",
        reward_types=["synthetic"],
        handler_for=handler_for,
    )
    w.request_drain()
    w.run()  # returns at once: drained
    assert w.readiness() == (False, "draining") and proxy.completed == []
    w.revive()
    assert w.readiness() == (True, "") and w.run_once() is True
    assert [lid for lid, _ in proxy.completed] == ["L1"] and len(made) == 1 and len(made[0].seen) == 1


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


@pytest.mark.parametrize(
    ("mean_run_s", "target_s", "max_k", "expected"),
    [
        (None, 0.25, 32, 1),  # nothing measured yet: one at a time
        (0.001, 0.25, 32, 32),  # a math check: capped at max_k
        (0.05, 0.25, 32, 5),  # a python test: about target_s worth
        (0.3, 0.25, 32, 1),  # longer than the target: one
        (60.0, 0.25, 32, 1),  # a long run: one
        (0.0, 0.25, 8, 8),
        (0.001, 0.25, 1, 1),  # bundles off
    ],
)
def test_bundle_size(mean_run_s: float | None, target_s: float, max_k: int, expected: int) -> None:
    assert bundle_size(mean_run_s, target_s, max_k) == expected


def test_short_runs_switch_to_bundles_completed_in_one_call_per_request() -> None:
    proxy = FakeProxy([lease(i) for i in range(1, 7)])
    proxy.refuse_complete = {"L4"}
    t = [0.0]  # an injected clock: each run takes 10 ms of it, whatever the machine's load
    h = Handler(StageOutput.final(Status.OK, 1.0), clock=t, run_s=0.01)
    w = make(proxy, h, max_bundle=4, clock=lambda: t[0])
    assert w.run_once() and [lid for lid, _ in proxy.completed] == ["L1"]  # unknown run time: k = 1
    assert w.mean_run_s == pytest.approx(0.01)  # fast: k reaches max_bundle
    assert w.run_once()
    assert proxy.bundle_calls == [4]
    ((items),) = proxy.bundle_completions
    assert [it["lease_id"] for it in items] == ["L2", "L3", "L4", "L5"]
    assert all(it["outcome"] == "final" and it["result"]["status"] == "ok" for it in items)
    assert (w.stats.completed, w.stats.rejected) == (4, 1)  # L4 refused alone, the rest landed
    assert w.run_once() and proxy.bundle_calls == [4, 4]
    assert [it["lease_id"] for it in proxy.bundle_completions[1]] == ["L6"]
    assert not w.run_once()


def test_bundle_heartbeats_together_and_skips_a_lease_it_lost() -> None:
    gate = threading.Event()
    proxy = FakeProxy([lease(1), lease(2), lease(3), lease(4)])
    proxy.refuse_heartbeat = {"L4"}  # expired and requeued while L2 ran: someone else has it
    h = Handler(StageOutput.final(Status.OK, 1.0))
    w = make(proxy, h, max_bundle=4, heartbeat_s=0.02)
    w.run_once()
    h.gate = gate
    t = threading.Thread(target=w.run_once)
    t.start()
    _wait_until(lambda: len(proxy.bundle_heartbeats) >= 2)
    gate.set()
    t.join(5)
    assert proxy.bundle_heartbeats[0] == ["L2", "L3", "L4"]
    assert all("L4" not in ids for ids in proxy.bundle_heartbeats[1:])
    assert [inp.request_id for inp in h.seen] == ["r1", "r2", "r3"]  # r4 never ran here
    assert [it["lease_id"] for it in proxy.bundle_completions[0]] == ["L2", "L3"]


def test_bundle_handed_out_while_draining_is_given_back() -> None:
    proxy = FakeProxy([lease(1), lease(2), lease(3)])
    h = Handler(StageOutput.final(Status.OK, 1.0))
    w = make(proxy, h, max_bundle=4)
    w.run_once()
    proxy.on_lease = w.request_drain
    assert not w.run_once()
    assert proxy.released == [("L2", "w1"), ("L3", "w1")] and len(h.seen) == 1


def test_drain_mid_bundle_gives_the_unstarted_items_back() -> None:
    proxy = FakeProxy([lease(i) for i in range(1, 6)])
    h = Handler(StageOutput.final(Status.OK, 1.0))
    w = make(proxy, h, max_bundle=4)
    w.run_once()
    h.run = _draining_after_one(h.run, w)  # type: ignore[method-assign]
    assert w.run_once()
    assert [it["lease_id"] for it in proxy.bundle_completions[0]] == ["L2"]
    assert proxy.released == [("L3", "w1"), ("L4", "w1"), ("L5", "w1")]


def test_an_overrun_bundle_reports_what_is_done_and_gives_the_rest_back() -> None:
    """A bundle sized by a mean that instant items set (e.g. empty requests) must not hold the
    others unrun behind a slow item while other workers are idle."""
    proxy = FakeProxy([lease(i) for i in range(1, 5)])
    t = [0.0]
    h = Handler(StageOutput.final(Status.OK, 1.0))
    w = make(proxy, h, max_bundle=4, clock=lambda: t[0])
    orig = h.run

    def timed(inp: StageInput) -> StageOutput:
        t[0] += 5.0 if inp.request_id == "r3" else 0.01  # r3 is slow
        return orig(inp)

    h.run = timed  # type: ignore[method-assign]
    w.run_once()
    w.mean_run_s = 0.01
    assert w.run_once()
    assert [[it["lease_id"] for it in c] for c in proxy.bundle_completions] == [["L2", "L3"]]
    assert proxy.released == [("L4", "w1")]


def test_proxy_without_bundles_falls_back_to_one_lease_per_call() -> None:
    proxy = FakeProxy([lease(1), lease(2)])
    w = make(proxy, Handler(StageOutput.final(Status.OK, 1.0)), max_bundle=4)
    w.run_once()

    def no_route(*_: Any) -> list[dict[str, Any]]:
        raise LeaseRejected(404, "not found")

    proxy.lease_bundle = no_route  # type: ignore[method-assign]
    assert not w.run_once() and w.max_bundle == 1
    assert w.run_once() and [lid for lid, _ in proxy.completed] == ["L1", "L2"]


def _draining_after_one(run: Any, w: Worker) -> Any:
    def wrapped(inp: StageInput) -> StageOutput:
        w.request_drain()
        return run(inp)  # type: ignore[no-any-return]

    return wrapped


def _wait_until(cond: Any, timeout_s: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("condition not met")
