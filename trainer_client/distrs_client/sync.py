"""``RewardClient``: the blocking client for trainer code that is not asyncio.

It runs one :class:`~distrs_client.aio.AsyncRewardClient` on a private event loop in a daemon
thread. ``submit`` never crosses into that thread synchronously - it appends to the shared buffer
and at most pokes the loop - so a generation loop calling it per finished sequence is not slowed
down; the blocking calls (``start_batch``, ``flush``, ``results``, ``score``) wait on the loop.
One implementation behind both clients keeps their retry and re-submission behaviour identical.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from distrs_client.aio import AsyncRewardClient
from distrs_client.errors import ClientClosedError
from distrs_client.models import RewardResult

T = TypeVar("T")


class RewardClient:
    """Blocking client of the DistRS reward service; see :class:`AsyncRewardClient` for arguments.

    Use it as a context manager, or call :meth:`close` when done (it posts what is buffered).
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="distrs-client", daemon=True)
        self._thread.start()
        self._closed = False

        async def make() -> AsyncRewardClient:
            client = AsyncRewardClient(url, token, **options)
            client._bind()
            return client

        try:
            self._client = self._run(make())
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ClientClosedError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start_batch(
        self,
        task: str,
        batch_id: str,
        size: int,
        reward_type: str | None = None,
        *,
        rollout_started_at: float | None = None,
    ) -> None:
        """Register a batch when its rollout starts (the planner's warm-up hint). Idempotent."""
        self._run(
            self._client.start_batch(task, batch_id, size, reward_type, rollout_started_at=rollout_started_at)
        )

    def submit(
        self, task: str, batch_id: str, request_id: str, reward_type: str, payload: dict[str, Any]
    ) -> None:
        """Queue one request and return at once; thread-safe. See AsyncRewardClient.submit."""
        if self._closed:
            raise ClientClosedError("client is closed")
        self._client.submit(task, batch_id, request_id, reward_type, payload)

    def flush(self) -> None:
        """Block until everything submitted so far was posted; raise the first error seen."""
        self._run(self._client.flush())

    def results(self, task: str, batch_id: str, timeout: float | None = None) -> list[RewardResult]:
        """Block until the batch is complete; results in submission order (see the async client)."""
        return self._run(self._client.results(task, batch_id, timeout))

    def score(
        self,
        reward_type: str,
        payload: dict[str, Any],
        *,
        task: str = "default",
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> RewardResult:
        """Score one request and wait for its result."""
        return self._run(
            self._client.score(reward_type, payload, task=task, request_id=request_id, timeout=timeout)
        )

    def score_many(
        self,
        items: Iterable[tuple[str, dict[str, Any]]],
        *,
        task: str = "default",
        batch_id: str | None = None,
        timeout: float | None = None,
    ) -> list[RewardResult]:
        """Score ``(reward_type, payload)`` pairs as one batch; results in the same order."""
        return self._run(self._client.score_many(list(items), task=task, batch_id=batch_id, timeout=timeout))

    def request_state(self, task: str, request_id: str) -> dict[str, Any] | None:
        """The service's record of one request, or None when it does not know it."""
        return self._run(self._client.request_state(task, request_id))

    def close(self) -> None:
        """Post what is buffered (best effort), close connections and stop the loop thread."""
        if self._closed:
            return
        try:
            self._run(self._client.aclose())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
