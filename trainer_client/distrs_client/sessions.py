"""Stateful sessions: a jailed python or bash interpreter that keeps its state between calls.

    from distrs_client import SessionClient

    with SessionClient("http://distrs:8000", token="...") as sessions:
        with sessions.open("my-task", "python", files={"data.csv": "a,b\\n1,2\\n"}) as s:
            s.exec("import csv; rows = list(csv.reader(open('data.csv')))")
            r = s.exec("len(rows)")
            print(r.value)              # '2': the repr of the trailing expression
            score = s.reward([{"code": "assert len(rows) == 2"}])["score"]

``AsyncSessionClient`` is the same over asyncio (``async with sessions.open(...) as s``, ``await
s.exec(...)``); ``SessionClient`` runs it on a private event loop in a thread, as ``RewardClient``
does. Leaving an ``open`` block deletes the session.

Every call is retried like the reward client's (connection errors, 5xx, 429; ``retry.py``), and
every exec carries an ``exec_id`` (yours, or a fresh one per call), so a retried exec is answered
once and never runs twice. An ended session raises: :class:`SessionGoneError` (410: ``code`` says
``session_expired``, ``session_lost``, ``session_limit_exceeded``) or ``NotFoundError`` (404:
``session_deleted`` or ``session_not_found``); the service never hands back a fresh empty state in
its place. A session's state lives in one worker's memory: a worker that dies loses it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from distrs_client.calls import RetryingCall
from distrs_client.errors import ClientClosedError, NotFoundError, SessionGoneError
from distrs_client.retry import RetryPolicy
from distrs_client.transport import HttpxTransport, Transport

T = TypeVar("T")
#: Added to an exec's own timeout for the HTTP call (the service's grace to cut and report).
EXEC_MARGIN_S = 60.0


@dataclass(frozen=True)
class ExecError:
    """An exception of a python cell (or a cut or restart of either kernel)."""

    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class ExecResult:
    """What one exec answered (docs/sessions.md)."""

    stdout: str
    stderr: str
    value: str | None  # python: repr of the trailing expression, as Jupyter shows it
    error: ExecError | None
    exit_code: int | None  # bash: the script's status
    duration_s: float
    timed_out: bool = False
    state_survived: bool = True  # False: the interpreter was restarted (files are kept)
    restarts: int = 0
    cpu_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exec_id: str | None = None

    @property
    def ok(self) -> bool:
        """No exception, no cut, and (bash) status 0."""
        return self.error is None and not self.timed_out and self.exit_code in (None, 0)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ExecResult:
        err = body.get("error")
        error = (
            ExecError(str(err.get("type", "")), str(err.get("message", "")), str(err.get("traceback", "")))
            if isinstance(err, Mapping)
            else None
        )
        return cls(
            stdout=str(body.get("stdout", "")),
            stderr=str(body.get("stderr", "")),
            value=body.get("value"),
            error=error,
            exit_code=body.get("exit_code"),
            duration_s=float(body.get("duration_s") or 0.0),
            timed_out=bool(body.get("timed_out", False)),
            state_survived=bool(body.get("state_survived", True)),
            restarts=int(body.get("restarts") or 0),
            cpu_s=float(body.get("cpu_s") or 0.0),
            stdout_truncated=bool(body.get("stdout_truncated", False)),
            stderr_truncated=bool(body.get("stderr_truncated", False)),
            exec_id=body.get("exec_id"),
        )


def _files(files: Mapping[str, str | bytes] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, data in (files or {}).items():
        if isinstance(data, bytes):
            out[path] = {"content": base64.b64encode(data).decode(), "encoding": "base64"}
        else:
            out[path] = data
    return out


class AsyncSession:
    """One open session (``AsyncSessionClient.create`` or ``open``)."""

    def __init__(self, call: RetryingCall, session_id: str, language: str, info: Mapping[str, Any]) -> None:
        self._call = call
        self.session_id = session_id
        self.language = language
        self.info = dict(info)
        self.closed = False

    @property
    def _path(self) -> str:
        return f"/v1/sessions/{self.session_id}"

    async def exec(
        self, code: str, *, stdin: str = "", timeout_s: float | None = None, exec_id: str | None = None
    ) -> ExecResult:
        """Run ``code``; its state carries over to the next exec. Retried safely (``exec_id``)."""
        body: dict[str, Any] = {"code": code, "stdin": stdin, "exec_id": exec_id or uuid.uuid4().hex}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        wait = (timeout_s or 600.0) + EXEC_MARGIN_S
        resp = await self._call("POST", f"{self._path}/exec", body=body, timeout_s=wait)
        return ExecResult.from_json(resp.body)

    async def state(self, kernel: bool = True) -> dict[str, Any]:
        """The session's record (and its interpreter's view: globals or cwd)."""
        resp = await self._call("GET", self._path, params={"kernel": str(kernel).lower()})
        out: dict[str, Any] = resp.body
        return out

    async def files(self) -> list[dict[str, Any]]:
        resp = await self._call("GET", f"{self._path}/files")
        listed: list[dict[str, Any]] = resp.body["files"]
        return listed

    async def read_file(self, path: str) -> bytes:
        resp = await self._call("GET", f"{self._path}/files/{path}", params={"encoding": "base64"})
        return base64.b64decode(resp.body["content_b64"])

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files (text or bytes) into the work dir."""
        await self._call("POST", f"{self._path}/files", body={"files": _files(files)})

    async def reward(
        self, tests: list[dict[str, Any]], *, scoring: str = "fraction", timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``{status, score, detail}`` of ``tests`` (``{code, stdin?, expected_stdout?}``), each run
        in a copy of the session's state (what a test changes is not kept)."""
        payload: dict[str, Any] = {"tests": tests, "scoring": scoring}
        if timeout_s is not None:
            payload["timeout_s"] = timeout_s
        wait = (timeout_s or 600.0) * len(tests) + EXEC_MARGIN_S
        resp = await self._call(
            "POST", f"{self._path}/reward", body={"reward_type": "tests", "payload": payload}, timeout_s=wait
        )
        out: dict[str, Any] = resp.body
        return out

    async def delete(self) -> None:
        """End the session (idempotent here: one already gone is left alone)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(NotFoundError, SessionGoneError):
            await self._call("DELETE", self._path)


class AsyncSessionClient:
    """Asyncio client of the session API.

    Args:
        url: base URL of the proxy. token: a ``trainer`` token (omit under ``--insecure``).
        timeout_s: per-call HTTP timeout (an exec waits its own ``timeout_s`` on top).
        retry: the retry policy of every call. transport: a custom :class:`Transport`.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        token: str | None = None,
        *,
        timeout_s: float = 120.0,
        max_connections: int = 64,
        retry: RetryPolicy | None = None,
        transport: Transport | None = None,
    ) -> None:
        self._transport = transport or HttpxTransport(
            url, token, timeout_s=timeout_s, max_connections=max_connections
        )
        self._closed = False
        self._call = RetryingCall(
            self._transport, retry or RetryPolicy(), asyncio.sleep, random.Random(), lambda: self._closed
        )

    async def create(
        self,
        task: str,
        language: str = "python",
        *,
        files: Mapping[str, str | bytes] | None = None,
        idle_timeout_s: float | None = None,
        max_lifetime_s: float | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> AsyncSession:
        """Open a session (``delete`` it when done, or use :meth:`open`)."""
        if self._closed:
            raise ClientClosedError("client is closed")
        body: dict[str, Any] = {"task": task, "language": language, "files": _files(files)}
        for key, value in (("idle_timeout_s", idle_timeout_s), ("max_lifetime_s", max_lifetime_s)):
            if value is not None:
                body[key] = value
        if limits is not None:
            body["limits"] = dict(limits)
        resp = await self._call("POST", "/v1/sessions", body=body)
        return AsyncSession(self._call, str(resp.body["session_id"]), language, resp.body)

    def session(self, session_id: str, language: str = "python") -> AsyncSession:
        """A handle on a session opened elsewhere (by id)."""
        return AsyncSession(self._call, session_id, language, {})

    @contextlib.asynccontextmanager
    async def open(self, task: str, language: str = "python", **options: Any) -> AsyncIterator[AsyncSession]:
        """``create`` on entry, ``delete`` on exit."""
        s = await self.create(task, language, **options)
        try:
            yield s
        finally:
            await s.delete()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._transport.aclose()

    async def __aenter__(self) -> AsyncSessionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Session:
    """The blocking face of an :class:`AsyncSession` (same methods, no ``await``)."""

    def __init__(self, client: SessionClient, inner: AsyncSession) -> None:
        self._client, self._inner = client, inner
        self.session_id, self.language, self.info = inner.session_id, inner.language, inner.info

    def exec(
        self, code: str, *, stdin: str = "", timeout_s: float | None = None, exec_id: str | None = None
    ) -> ExecResult:
        return self._client._run(self._inner.exec(code, stdin=stdin, timeout_s=timeout_s, exec_id=exec_id))

    def state(self, kernel: bool = True) -> dict[str, Any]:
        return self._client._run(self._inner.state(kernel))

    def files(self) -> list[dict[str, Any]]:
        return self._client._run(self._inner.files())

    def read_file(self, path: str) -> bytes:
        return self._client._run(self._inner.read_file(path))

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        self._client._run(self._inner.write_files(files))

    def reward(
        self, tests: list[dict[str, Any]], *, scoring: str = "fraction", timeout_s: float | None = None
    ) -> dict[str, Any]:
        return self._client._run(self._inner.reward(tests, scoring=scoring, timeout_s=timeout_s))

    def delete(self) -> None:
        self._client._run(self._inner.delete())


class SessionClient:
    """Blocking client of the session API; see :class:`AsyncSessionClient` for the arguments."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="distrs-sessions", daemon=True)
        self._thread.start()

        async def make() -> AsyncSessionClient:
            return AsyncSessionClient(url, token, **options)

        self._client = self._run(make())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def create(self, task: str, language: str = "python", **options: Any) -> Session:
        return Session(self, self._run(self._client.create(task, language, **options)))

    def session(self, session_id: str, language: str = "python") -> Session:
        return Session(self, self._client.session(session_id, language))

    @contextlib.contextmanager
    def open(self, task: str, language: str = "python", **options: Any) -> Iterator[Session]:
        s = self.create(task, language, **options)
        try:
            yield s
        finally:
            s.delete()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._client.aclose())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
