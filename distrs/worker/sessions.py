"""A session worker: holds sessions in its memory, polls the proxy for their calls, runs them.

Why a worker of its own rather than a stage: a session pins capacity (a jail and its state in
this process) and its calls must come back here, so a session worker polls for *its* calls
(``routes/session_ops.py``; the poll is also its liveness beat) instead of leasing the head of a
shared queue. One poller thread takes calls; each session's calls run one after another on a pool
of ``slots`` threads (different sessions in parallel), and a reporter thread sends the answers
back, several per request when they pile up.

Drain (scale-down, SIGTERM): the worker takes no new session but keeps serving those it holds
until their users delete them or they expire; no session in use is ever killed for a scale-down.
Only a stop with a deadline (``stop``) ends what is left at the deadline, and tells the proxy
(``release``: they end ``session_lost``, reason ``drained``) instead of letting them time out.
A worker that dies takes its sessions with it; the proxy ends them ``session_lost`` once its
polls stop (``DISTRS_SESSION_WORKER_TTL_S``).

``run_once`` polls once and waits for the calls it got, so tests drive the loop step by step.
"""

from __future__ import annotations

import base64
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from distrs.core.sessions import EndReason, Language, OpKind, SessionLimits
from distrs.sandbox.base import Sandbox, SandboxError
from distrs.sandbox.stateful import SessionDead, StatefulSession
from distrs.worker.proxy_client import HttpProxyClient, LeaseRejected, ProxyUnavailable
from distrs.worker.session_spares import Spares

log = logging.getLogger(__name__)
DEAD_REASONS = {"cpu_total": EndReason.LIMIT, "crashed": EndReason.LOST, "closed": EndReason.LOST}


class SessionClient(Protocol):
    def session_poll(self, body: dict[str, Any], wait_s: float) -> list[dict[str, Any]]: ...

    def session_complete(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    def session_release(self, worker_id: str, sessions: list[str]) -> None: ...


class HttpSessionClient(HttpProxyClient):
    """The proxy's session routes over the worker's HTTP client (its credential included)."""

    def session_poll(self, body: dict[str, Any], wait_s: float) -> list[dict[str, Any]]:
        r = self._post("/v1/session-ops/poll", {**body, "wait_s": wait_s}, wait_s + 10)
        if r.status_code == 204:
            return []
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        ops: list[dict[str, Any]] = r.json()["ops"]
        return ops

    def session_complete(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        r = self._post("/v1/session-ops/complete", {"worker_id": worker_id, "items": items})
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        answers: list[dict[str, Any]] = r.json()["answers"]
        return answers

    def session_release(self, worker_id: str, sessions: list[str]) -> None:
        r = self._post("/v1/session-ops/release", {"worker_id": worker_id, "sessions": sessions})
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)


def _lost(message: str, code: str = "session_lost", status: int = 410) -> dict[str, Any]:
    return {"status": status, "code": code, "message": message}


class SessionWorker:
    def __init__(
        self,
        worker_id: str,
        client: SessionClient,
        sandbox: Callable[[], Sandbox],
        *,
        capacity: int = 200,
        slots: int = 16,
        poll_wait_s: float = 5.0,
        spares: Spares | None = None,
        default_timeout_s: float = 30.0,
    ) -> None:
        self.worker_id = worker_id
        self.client = client
        self._sandbox = sandbox
        self.capacity = capacity
        self.slots = slots
        self.poll_wait_s = poll_wait_s
        self.sessions: dict[str, StatefulSession] = {}
        self._lock = threading.Lock()
        self._backlog: dict[str, deque[dict[str, Any]]] = {}  # session -> its calls not started
        self._running: set[str] = set()  # sessions with a call running
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"{worker_id}-call")
        self._reports: queue.Queue[dict[str, Any]] = queue.Queue()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._draining = threading.Event()
        self._stopped = threading.Event()
        self._reporter = threading.Thread(target=self._report_loop, name=f"{worker_id}-report", daemon=True)
        self._reporter.start()
        self.creating = 0  # creates in flight (spares are opened only while none is)
        self.default_timeout_s = default_timeout_s
        self.spares = spares  # jails opened ahead of creates, shared by the host's workers

    # the loop ---------------------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def request_drain(self) -> None:
        self._draining.set()

    def revive(self) -> None:
        self._draining.clear()

    def run(self, backoff_s: float = 1.0) -> None:
        """Serve until drained and holding no session (or ``stop``)."""
        while not self._stopped.is_set():
            if self.draining and not self.sessions and self._in_flight == 0:
                return
            try:
                self._poll_and_dispatch(self.poll_wait_s)
            except (ProxyUnavailable, LeaseRejected) as exc:
                log.warning("session worker %s: proxy unavailable: %s", self.worker_id, exc)
                self._stopped.wait(backoff_s)

    def run_once(self, wait_s: float = 0.0) -> int:
        """Poll once, run what came and wait until every call is reported; how many came."""
        n = self._poll_and_dispatch(wait_s)
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=60)
        self._reports.join()
        return n

    def _poll_and_dispatch(self, wait_s: float) -> int:
        with self._lock:
            body = {
                "worker_id": self.worker_id,
                "capacity": self.capacity,
                "open": len(self.sessions),
                "spares": 0 if self.spares is None else self.spares.count(),  # the host's pool
                "draining": self.draining,
                "max_ops": max(1, self.slots * 4),
            }
        ops = self.client.session_poll(body, wait_s)
        for op in ops:
            self._dispatch(op)
        return len(ops)

    def _dispatch(self, op: dict[str, Any]) -> None:
        sid = op["session_id"]
        with self._lock:
            self._in_flight += 1
            if sid in self._running:  # calls of one session run in order, one at a time
                self._backlog.setdefault(sid, deque()).append(op)
                return
            self._running.add(sid)
        self._pool.submit(self._serve_session, sid, op)

    def _serve_session(self, sid: str, op: dict[str, Any]) -> None:
        nxt: dict[str, Any] | None = op
        while nxt is not None:
            try:
                report = self.handle(nxt)
            except Exception as exc:  # a bug of ours: the call fails, the worker goes on
                log.exception("session call %s failed", nxt.get("op_id"))
                report = {
                    "op_id": nxt["op_id"],
                    "error": _lost(f"{type(exc).__name__}: {exc}", "internal_error", 500),
                }
            self._reports.put(report)
            with self._lock:
                self._in_flight -= 1
                q = self._backlog.get(sid)
                nxt = q.popleft() if q else None
                if nxt is None:
                    self._running.discard(sid)
                    self._backlog.pop(sid, None)
                self._idle.notify_all()

    def _report_loop(self) -> None:
        while True:
            items = [self._reports.get()]
            while len(items) < 256:
                try:
                    items.append(self._reports.get_nowait())
                except queue.Empty:
                    break
            self._send(items)
            for _ in items:
                self._reports.task_done()

    def _send(self, items: list[dict[str, Any]]) -> None:
        for attempt in range(8):
            try:
                answers = self.client.session_complete(self.worker_id, items)
            except ProxyUnavailable as exc:
                log.warning("session worker %s: report failed (%s); retrying", self.worker_id, exc)
                time.sleep(min(2.0, 0.1 * 2**attempt))
                continue
            except LeaseRejected as exc:
                log.error("session worker %s: reports refused: %s", self.worker_id, exc)
                return
            for a in answers:
                if a.get("error"):
                    log.warning("report of %s refused: %s", a.get("op_id"), a["error"])
                if a.get("close"):
                    self._close(str(a["op_id"]).split(".", 1)[0])
            return
        log.error("session worker %s: could not report %d calls", self.worker_id, len(items))

    # calls ------------------------------------------------------------------------------------
    def handle(self, op: dict[str, Any]) -> dict[str, Any]:
        """One call: its report (``result`` or ``error``, and what it changed of the session)."""
        kind, sid, body = OpKind(op["kind"]), op["session_id"], op.get("body") or {}
        out: dict[str, Any] = {"op_id": op["op_id"]}
        if kind is OpKind.CREATE:
            return {**out, **self._create(sid, body)}
        s = self.sessions.get(sid)
        if kind is OpKind.CLOSE:
            self._close(sid)
            return {**out, "result": {}}
        if s is None:
            return {
                **out,
                "error": _lost("the session is not held here"),
                "session": {"ended": EndReason.LOST.value},
            }
        try:
            out["result"] = self._run(s, kind, body)
        except SessionDead as e:
            self._close(sid)
            reason = DEAD_REASONS.get(e.reason, EndReason.LOST)
            code = "session_limit_exceeded" if reason is EndReason.LIMIT else "session_lost"
            return {**out, "error": _lost(str(e), code), "session": {"ended": reason.value}}
        except ValueError as e:
            return {**out, "error": {"status": 422, "code": "invalid_request", "message": f"path: {e}"}}
        except OSError as e:
            return {
                **out,
                "error": {"status": 409, "code": "file_error", "message": f"path: {e.strerror or e}"},
            }
        session = {"restarts": out["result"].get("restarts"), "cpu_total_s": out["result"].get("cpu_total_s")}
        if out["result"].get("ended"):
            session["ended"] = DEAD_REASONS.get(str(out["result"]["ended"]), EndReason.LOST).value
            self._close(sid)
        out["session"] = {k: v for k, v in session.items() if v is not None}
        return out

    def _run(self, s: StatefulSession, kind: OpKind, body: dict[str, Any]) -> dict[str, Any]:
        if kind is OpKind.EXEC:
            return s.exec(
                str(body.get("code", "")), stdin=str(body.get("stdin", "")), timeout_s=body.get("timeout_s")
            )
        if kind is OpKind.TEST:
            runs = [
                s.test(str(t.get("code", "")), stdin=str(t.get("stdin", "")), timeout_s=body.get("timeout_s"))
                for t in body.get("tests", [])
            ]
            return {"tests": runs}
        if kind is OpKind.STATE:
            return s.state()
        if kind is OpKind.FILES_LIST:
            return {"files": s.list_files()}
        if kind is OpKind.FILES_READ:
            data = s.read_file(str(body["path"]), int(body.get("max_bytes", 1 << 20)))
            return {"content_b64": None if data is None else base64.b64encode(data).decode()}
        if kind is OpKind.FILES_WRITE:
            s.write_file(str(body["path"]), base64.b64decode(body["content_b64"]))
            return {}
        raise ValueError(f"unknown call {kind}")

    def _create(self, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            full = len(self.sessions) >= self.capacity
            self.creating += 1
        try:
            if full:
                return {"error": _lost(f"worker {self.worker_id} is full", "session_create_failed", 503)}
            s, spare = self._open(body)
        except (SandboxError, OSError, ValueError) as e:
            log.warning("session %s could not be opened: %s", sid, e)
            return {"error": _lost(str(e)[:500], "session_create_failed", 503)}
        finally:
            with self._lock:
                self.creating -= 1
        with self._lock:
            self.sessions[sid] = s
        return {"result": {"forked": s.forked, "spare": spare}}

    def _open(self, body: dict[str, Any]) -> tuple[StatefulSession, bool]:
        """A session for a create: a spare jail where the create asks for the defaults, else one
        forked now; (session, whether it was a spare)."""
        language = Language(body["language"])
        limits = SessionLimits.model_validate(body.get("limits") or {})
        timeout = float(body.get("timeout_s") or self.default_timeout_s)
        files = {p: base64.b64decode(c) for p, c in (body.get("files") or {}).items()}
        default = limits == SessionLimits() and timeout == self.default_timeout_s
        s = self.spares.take(language) if self.spares is not None and default else None
        if s is None:
            return StatefulSession.open(
                self._sandbox(), language, limits, files, default_timeout_s=timeout
            ), False
        try:
            for path, data in files.items():
                s.write_file(path, data)
        except BaseException:
            s.close()
            raise
        return s, True

    def _close(self, sid: str) -> None:
        with self._lock:
            s = self.sessions.pop(sid, None)
        if s is not None:
            s.close()

    # stopping ---------------------------------------------------------------------------------
    def stop(self, timeout_s: float) -> None:
        """Drain; after ``timeout_s`` end what is left (telling the proxy), then stop polling."""
        self.request_drain()
        deadline = time.monotonic() + timeout_s
        while self.sessions and time.monotonic() < deadline:
            time.sleep(0.2)
        left = list(self.sessions)
        if left:
            log.warning("session worker %s stops with %d sessions open: they end", self.worker_id, len(left))
            try:
                self.client.session_release(self.worker_id, left)
            except (ProxyUnavailable, LeaseRejected) as exc:  # they end session_lost by the TTL
                log.warning("could not release sessions: %s", exc)
            for sid in left:
                self._close(sid)
        self._stopped.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
