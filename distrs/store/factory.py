"""Pick the QueueStore for a process from its settings (vLLM ``create_request_queue`` style).

Memory when ``redis_url`` is unset (one process, the embedded default), Redis otherwise.
"""

from __future__ import annotations

from distrs.config import StoreSettings
from distrs.store.base import QueueStore


def create_store(settings: StoreSettings) -> QueueStore:
    """A new, not yet started store; call ``await store.start()`` before use."""
    if settings.redis_url:
        from distrs.store.redis import RedisStore  # imported lazily: redis is only needed here

        return RedisStore.from_url(settings.redis_url, settings)
    from distrs.store.memory import MemoryStore

    return MemoryStore(
        policy=settings.queue_policy,
        history_batches=settings.history_batches,
        default_batch_span_s=settings.default_batch_span_s,
    )
