"""``RewardClient``: the blocking client for trainer code that is not asyncio.

It runs one :class:`~distrs_client.aio.AsyncRewardClient` on a private event loop in a daemon
thread. ``submit`` never crosses into that thread synchronously - it appends to the shared buffer
and at most pokes the loop - so a generation loop calling it per finished sequence is not slowed
down; the blocking calls (``start_batch``, ``flush``, ``results``, ``score``) wait on the loop.
One implementation behind both clients keeps their retry and re-submission behaviour identical.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from distrs_client.aio import AsyncRewardClient
from distrs_client.errors import ClientClosedError

T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[AsyncRewardClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[RewardClient, P], T]:
    """A :class:`RewardClient` method that runs ``method`` of its async client and waits for it."""

    @functools.wraps(method)
    def call(self: RewardClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    call.__qualname__ = f"RewardClient.{method.__name__}"
    return call


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

    def submit(
        self, task: str, batch_id: str, request_id: str, reward_type: str, payload: dict[str, Any]
    ) -> None:
        """Queue one request and return at once; thread-safe. See AsyncRewardClient.submit."""
        if self._closed:
            raise ClientClosedError("client is closed")
        self._client.submit(task, batch_id, request_id, reward_type, payload)

    # The blocking calls take the async client's arguments and docs unchanged and wait on the loop.
    start_batch = _blocking(AsyncRewardClient.start_batch)
    flush = _blocking(AsyncRewardClient.flush)
    results = _blocking(AsyncRewardClient.results)
    score = _blocking(AsyncRewardClient.score)
    score_many = _blocking(AsyncRewardClient.score_many)
    request_state = _blocking(AsyncRewardClient.request_state)
    reward_types = _blocking(AsyncRewardClient.reward_types)

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
