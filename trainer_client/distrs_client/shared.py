"""One client per process (and per event loop) for code that is called as a bare function.

Framework hooks - a verl ``compute_score``, a TRL reward function, a Ray task - are plain functions
the framework calls many times; opening a connection pool per call would cost more than the
reward itself. This cache hands out one long-lived client per ``(url, token)`` (per running loop
for the async client), created on first use and closed at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from typing import Any

from distrs_client.aio import AsyncRewardClient
from distrs_client.sync import RewardClient

_lock = threading.Lock()
_sync: dict[tuple[str, str | None], RewardClient] = {}
_async: dict[tuple[int, str, str | None], AsyncRewardClient] = {}

DEFAULT_URL = "http://127.0.0.1:8000"


def resolve(url: str | None, token: str | None) -> tuple[str, str | None]:
    """``url``/``token`` or the ``DISTRS_URL`` / ``DISTRS_TOKEN`` environment variables."""
    return url or os.environ.get("DISTRS_URL") or DEFAULT_URL, token or os.environ.get("DISTRS_TOKEN")


def shared_client(url: str | None = None, token: str | None = None, **options: Any) -> RewardClient:
    """This process's :class:`RewardClient` for ``(url, token)``; ``options`` apply on creation."""
    key = resolve(url, token)
    with _lock:
        client = _sync.get(key)
        if client is None or client._closed:
            client = _sync[key] = RewardClient(key[0], key[1], **options)
        return client


def shared_async_client(
    url: str | None = None, token: str | None = None, **options: Any
) -> AsyncRewardClient:
    """The running loop's :class:`AsyncRewardClient` for ``(url, token)``."""
    u, t = resolve(url, token)
    loop = asyncio.get_running_loop()
    key = (id(loop), u, t)
    with _lock:
        client = _async.get(key)
        # A loop's id can be reused after it closed: only a client bound to this very loop will do.
        stale = client is not None and client._loop is not None and client._loop is not loop
        if client is None or client._closed or stale:
            client = _async[key] = AsyncRewardClient(u, t, **options)
        return client


def close_shared() -> None:
    """Close every cached blocking client (posting what they still buffer)."""
    with _lock:
        clients = list(_sync.values())
        _sync.clear()
    for c in clients:
        with contextlib.suppress(Exception):
            c.close()


atexit.register(close_shared)
