"""One logical call to the service, retried with full-jitter backoff on connection errors, 5xx
and 429 (``retry.py``), honouring ``Retry-After``, a caller's deadline, and the client closing."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from distrs_client.errors import ClientClosedError, DistrsError, ServiceUnavailableError, api_error
from distrs_client.retry import RetryPolicy, is_retryable_status, parse_retry_after
from distrs_client.transport import QueryParams, Response, Transport

Sleep = Callable[[float], Awaitable[None]]


class RetryingCall:
    """Calls through ``transport`` with ``retry``; gives up with ClientClosedError once ``closed()``."""

    def __init__(
        self,
        transport: Transport,
        retry: RetryPolicy,
        sleep: Sleep,
        rng: random.Random,
        closed: Callable[[], bool],
    ) -> None:
        self.transport = transport
        self.retry = retry
        self.sleep = sleep
        self.rng = rng
        self.closed = closed

    async def __call__(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: QueryParams | None = None,
        timeout_s: float | None = None,
        deadline: float | None = None,
    ) -> Response:
        """One logical call with retries on connection errors, 5xx and 429."""
        start = time.monotonic()
        attempt = 0
        while True:
            retry_after = None
            try:
                resp = await self.transport.request(
                    method, path, body=body, params=params, timeout_s=timeout_s
                )
            except ServiceUnavailableError as exc:
                err: DistrsError = exc
            else:
                if resp.status < 400:
                    return resp
                err = api_error(resp.status, resp.body)
                if not is_retryable_status(resp.status):
                    raise err
                retry_after = parse_retry_after(_header(resp, "retry-after"), time.time())
            delay = self.retry.delay(attempt, self.rng.random(), retry_after)
            if not self.retry.should_retry(time.monotonic() - start, delay) or (
                deadline is not None and time.monotonic() + delay >= deadline
            ):
                raise err
            if self.closed():
                raise ClientClosedError("client is closed") from err
            await self.sleep(delay)
            attempt += 1


def _header(resp: Response, name: str) -> str | None:
    for k, v in resp.headers.items():
        if k.lower() == name:
            return v
    return None
