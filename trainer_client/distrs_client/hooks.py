"""Rollout hooks: send a sequence's reward request the moment it finishes generating.

DistRS hooks the end of each rollout so requests reach the service while the rest of the batch is
still generating (DistRS paper, Sec. 6 "Implementation"); the rollout start is the batch hint
(:meth:`RewardClient.start_batch`). Two variants:

* :class:`ThreadRolloutHook` - for a generation loop in this process: ``on_finish`` is a queue put;
  a daemon thread extracts the code/answer and hands it to the client's coalescing buffer.
* :func:`ray_submit_fn` - a Ray remote function for rollout workers that run elsewhere: calling
  ``.remote(...)`` returns immediately, and the task (zero CPUs reserved, so it never competes with
  generation for a slot) submits through a per-process client and resolves once the service has
  accepted the request. ``ray`` is imported only when this is called.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from distrs_client.extract import build_payload
from distrs_client.shared import shared_client
from distrs_client.sync import RewardClient

PayloadFn = Callable[..., dict[str, Any]]


class ThreadRolloutHook:
    """Submit finished sequences without blocking the generation loop.

    Args:
        client: the client requests go through.
        task: the training task (tenant-scoped namespace of request ids).
        reward_type: the reward type requests are scored with.
        payload_fn: ``(reward_type, completion, **fields) -> payload``; defaults to
            :func:`~distrs_client.extract.build_payload`.
    """

    def __init__(
        self,
        client: RewardClient,
        task: str,
        reward_type: str,
        *,
        payload_fn: PayloadFn = build_payload,
    ) -> None:
        self._client = client
        self._task = task
        self._reward_type = reward_type
        self._payload_fn = payload_fn
        self._q: queue.SimpleQueue[tuple[str, str, str, dict[str, Any]] | None] = queue.SimpleQueue()
        self._pending = 0
        self._cv = threading.Condition()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="distrs-rollout-hook", daemon=True)
        self._thread.start()

    def start_batch(self, batch_id: str, size: int) -> None:
        """Call when the rollout of a batch starts (the warm-up hint)."""
        self._client.start_batch(self._task, batch_id, size, self._reward_type)

    def on_finish(self, batch_id: str, request_id: str, completion: str, **fields: Any) -> None:
        """Call when one sequence finishes; returns immediately. ``fields`` go to ``payload_fn``
        (e.g. ``ground_truth=`` for math, ``tests=`` for code)."""
        with self._cv:
            self._pending += 1
        self._q.put((batch_id, request_id, completion, fields))

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every finished sequence was handed to the client, then flush it."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._pending == 0, timeout):
                raise TimeoutError("rollout hook did not drain in time")
        self._client.flush()

    def results(self, batch_id: str, timeout: float | None = None) -> list[Any]:
        """Drain, then wait for the batch's results in submission order."""
        self.drain(timeout)
        return self._client.results(self._task, batch_id, timeout)

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch_id, request_id, completion, fields = item
            try:
                payload = self._payload_fn(self._reward_type, completion, **fields)
                self._client.submit(self._task, batch_id, request_id, self._reward_type, payload)
            except Exception as exc:
                self.errors.append(exc)
            finally:
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()


def submit_finished(
    url: str | None,
    token: str | None,
    task: str,
    batch_id: str,
    request_id: str,
    reward_type: str,
    completion: str,
    fields: dict[str, Any] | None = None,
) -> str:
    """Extract the payload from ``completion`` and submit it through this process's shared client.

    Returns ``request_id`` once the service accepted it. This is the body of the Ray task.
    """
    client = shared_client(url, token)
    payload = build_payload(reward_type, completion, **(fields or {}))
    client.submit(task, batch_id, request_id, reward_type, payload)
    client.flush()
    return request_id


def ray_submit_fn(num_cpus: float = 0, max_retries: int = 3) -> Any:
    """A Ray remote function wrapping :func:`submit_finished`.

    Usage in a rollout worker: ``fn = ray_submit_fn(); fn.remote(url, token, task, batch_id, rid,
    "cuda", text)`` - fire and forget, or keep the ObjectRef to know when it was accepted.
    Retried by Ray on worker failure; safe because request ids are idempotent.
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised only without ray
        raise ImportError("ray_submit_fn needs Ray: pip install 'distrs-client[ray]'") from exc
    return ray.remote(num_cpus=num_cpus, max_retries=max_retries)(submit_finished)
