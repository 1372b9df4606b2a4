"""The session worker with real jails and a fake of its own proxy client: calls of one session run
in order, reports carry what changed of the session, spares serve creates with the defaults, a
call for a session it does not hold ends that session lost, and a drained worker stops once it
holds nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrs.core.sessions import Language, SessionLimits
from distrs.sandbox import SandboxSettings
from distrs.sandbox.factory import probe_bwrap
from distrs.sandbox.local import BWRAP, LocalSandbox
from distrs.sandbox.stateful import StatefulSession
from distrs.worker.session_spares import Spares
from distrs.worker.sessions import SessionWorker
from tests.requirements import need


class FakeClient:
    """Hands out scripted polls and records every report and poll body."""

    def __init__(self) -> None:
        self.polls: list[list[dict[str, Any]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.reports: dict[str, dict[str, Any]] = {}
        self.released: list[str] = []

    def session_poll(self, body: dict[str, Any], wait_s: float) -> list[dict[str, Any]]:
        self.bodies.append(body)
        return self.polls.pop(0) if self.polls else []

    def session_complete(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for item in items:
            self.reports[item["op_id"]] = item
        return [{"op_id": i["op_id"], "error": None, "close": False} for i in items]

    def session_release(self, worker_id: str, sessions: list[str]) -> None:
        self.released += sessions


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    settings = SandboxSettings(workdir_base=str(tmp_path / "sbx"), uid_base=63100, uid_count=16)
    reason = probe_bwrap(settings)
    need("bubblewrap jail", "sessions run in it", found=reason is None, detail=reason or "")
    sb = LocalSandbox(settings, BWRAP)
    yield sb
    sb.close_zygotes()


def op(op_id: str, kind: str, sid: str = "s1", **body: Any) -> dict[str, Any]:
    return {"op_id": op_id, "session_id": sid, "kind": kind, "body": body}


def create(sid: str = "s1", **body: Any) -> dict[str, Any]:
    base = {"language": "python", "limits": SessionLimits().model_dump(), "files": {}, "timeout_s": 30.0}
    return op(f"{sid}.create", "create", sid, **{**base, **body})


def test_calls_of_a_session_run_in_order_and_report_what_changed(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    w = SessionWorker("w1", client, lambda: sandbox, capacity=4, slots=4)
    client.polls = [
        [create(files={"f.txt": "aGk="})],
        [op(f"s1.e{i}", "exec", code=f"x = {i} if {i} == 0 else x * 10 + {i}\nx") for i in range(4)],
        [op("s1.r", "files_read", path="f.txt", max_bytes=100), op("s1.c", "close")],
    ]
    assert w.run_once() == 1
    assert client.reports["s1.create"]["result"]["forked"] is True
    w.run_once()
    assert [client.reports[f"s1.e{i}"]["result"]["value"] for i in range(4)] == ["0", "1", "12", "123"]
    assert client.reports["s1.e3"]["session"] == {"restarts": 0, "cpu_total_s": pytest.approx(0.0, abs=5)}
    w.run_once()
    assert client.reports["s1.r"]["result"]["content_b64"] == "aGk="
    assert w.sessions == {}
    assert client.bodies[0]["capacity"] == 4 and client.bodies[0]["open"] == 0


def test_a_call_for_a_session_not_held_here_ends_it_lost(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    w = SessionWorker("w1", client, lambda: sandbox)
    client.polls = [[op("s9.e1", "exec", "s9", code="1")]]
    w.run_once()
    report = client.reports["s9.e1"]
    assert report["error"]["code"] == "session_lost" and report["session"] == {"ended": "lost"}


def test_a_session_over_its_total_cpu_is_reported_ended(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    w = SessionWorker("w1", client, lambda: sandbox)
    limits = SessionLimits(exec_cpu_s=0.2, total_cpu_s=0.3).model_dump()
    client.polls = [[create(limits=limits)], [op("s1.e1", "exec", code="while True: pass", timeout_s=20)]]
    w.run_once()
    w.run_once()
    ended = client.reports["s1.e1"]
    if ended["session"].get("ended") is None:  # the first cut may stop just short of the total
        client.polls = [[op("s1.e2", "exec", code="while True: pass", timeout_s=20)]]
        w.run_once()
        ended = client.reports["s1.e2"]
    assert ended["session"]["ended"] == "limit_exceeded" and "s1" not in w.sessions


def test_spares_serve_creates_with_the_defaults_only(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    holder: list[SessionWorker] = []

    def open_spare(lang: Language) -> StatefulSession:
        return StatefulSession.open(sandbox, lang, SessionLimits())

    spares = Spares(
        open_spare,
        room=lambda: 4 - sum(len(w.sessions) for w in holder),
        quiet=lambda: True,
        warm_min=1,
        window_s=60.0,
    )
    try:
        w = SessionWorker("w1", client, lambda: sandbox, capacity=4, spares=spares)
        holder.append(w)
        deadline = time.monotonic() + 30
        while spares.count() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        client.polls = [
            [create("s1", files={"a.txt": "MQ=="})],
            [create("s2", limits=SessionLimits(memory_mb=256).model_dump())],
            [op("s1.e", "exec", "s1", code="open('a.txt').read()")],
        ]
        w.run_once()
        w.run_once()
        w.run_once()
        assert client.reports["s1.create"]["result"]["spare"] is True
        assert client.reports["s2.create"]["result"]["spare"] is False  # its own limits: forked now
        assert client.reports["s1.e"]["result"]["value"] == "'1'"  # its files written into the spare
        assert client.bodies[-1]["spares"] >= 0
    finally:
        spares.close()
        for s in list(holder[0].sessions.values()) if holder else []:
            s.close()


def test_a_drained_worker_keeps_its_session_then_stops_when_it_holds_none(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    w = SessionWorker("w1", client, lambda: sandbox, poll_wait_s=0.0)
    client.polls = [[create()]]
    w.run_once()
    w.request_drain()
    client.polls = [[op("s1.e", "exec", code="2 + 2")], [op("s1.c", "close")]]
    w.run(backoff_s=0.01)  # returns only once its one session is closed
    assert client.reports["s1.e"]["result"]["value"] == "4"
    assert all(b["draining"] for b in client.bodies[1:]) and w.sessions == {}


def test_stop_releases_what_is_left_at_the_deadline(sandbox: LocalSandbox) -> None:
    client = FakeClient()
    w = SessionWorker("w1", client, lambda: sandbox)
    client.polls = [[create()]]
    w.run_once()
    w.stop(timeout_s=0.2)
    assert client.released == ["s1"] and w.sessions == {}
