"""Where sessions are kept (``base.py``): the in-process store and the Redis one, and a factory."""

from __future__ import annotations

from distrs.config import StoreSettings
from distrs.store.sessions.base import SessionStore


def create_session_store(settings: StoreSettings, namespace: str = "distrs") -> SessionStore:
    """The session store of a process: memory when ``redis_url`` is unset, else Redis in the
    settings' mode (standalone, cluster, sentinel), on a client of its own."""
    if not settings.redis_url:
        from distrs.store.sessions.memory import MemorySessionStore

        return MemorySessionStore()
    from distrs.store.sessions.redis import RedisSessionStore

    url = settings.redis_url
    if settings.redis_mode == "cluster":
        from distrs.store.redis.client import connect_cluster

        return RedisSessionStore(connect_cluster(url, settings), namespace=namespace)
    if settings.redis_mode == "sentinel":
        from distrs.store.redis.sentinel import connect_sentinel

        return RedisSessionStore(connect_sentinel(url, settings), namespace=namespace)
    from distrs.store.redis.client import connect

    return RedisSessionStore(connect(url, settings), namespace=namespace)


__all__ = ["SessionStore", "create_session_store"]
