"""The proxy's app: FastAPI, with its hottest routes answered before FastAPI's per-call layers.

A lease or a completion through FastAPI passes, before its handler runs, a check for
OpenTelemetry providers (three environment lookups per call, FastAPI's native telemetry), an
exception-telemetry layer, FastAPI's own body-limit layer, the exception middleware (a request
object and a wrapper), an exit stack for dependencies and the router's scan: a fifth of the
proxy's CPU per request lifecycle with the memory store (0.77 -> 0.62 ms, measured A/B), for
nothing those routes use. The routes taken here are the plain ones (``plain_routes.py``: a
handler that takes the bare request and does its own checks), so ``ProxyApp`` matches a call
against them first and, on a full match, runs the route itself with what it needs of the stack:

- the app's exception handlers, looked up exactly as Starlette's exception middleware does (the
  route's own wrapper reads them from the scope);
- Starlette's ``ServerErrorMiddleware`` with the app's ``Exception`` handler, so that a fault is
  answered and logged as on every other route;
- the app's body limit (``BodyLimit``; a chunked body takes the full stack, which counts it).

Anything else (another path, a method the route does not take, a chunked body) takes the full
FastAPI stack, unchanged. With an OpenTelemetry provider configured when the app starts serving,
every call takes the full stack too, so that FastAPI's spans and metrics cover the hot routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send


def body_framing(headers: list[tuple[bytes, bytes]], limit: int) -> str | None:
    """``too_large`` when Content-Length exceeds ``limit``, ``chunked`` for a body sent with
    Transfer-Encoding (its size is known only as it is read), else None."""
    for k, v in headers:
        if k == b"content-length" and v.isdigit() and int(v) > limit:
            return "too_large"
        if k == b"transfer-encoding":
            return "chunked"
    return None


class ProxyApp(FastAPI):
    """FastAPI with the hot path above (module docstring)."""

    _hot: list[Route] | None = None
    _hot_stack: ServerErrorMiddleware | None = None
    _body_limit = 0
    _reject: Callable[[Any], Any] | None = None
    _hot_on: bool | None = None  # decided on the first call (telemetry may be set up late)

    def serve_hot(self, routes: list[Route], body_limit: int, reject: Callable[[Any], Any]) -> None:
        """Answer ``routes`` (plain routes of this app, in match order) on the hot path; bodies
        over ``body_limit`` bytes are answered by ``reject(send)``."""
        self._hot, self._body_limit, self._reject = routes, body_limit, reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._hot and self._hot_enabled():
            for route in self._hot:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    await self._serve(route, scope, child, receive, send)
                    return
                if match is Match.PARTIAL:  # the path, with another method: the stack's 405
                    break
        await super().__call__(scope, receive, send)

    def _hot_enabled(self) -> bool:
        if self._hot_on is None:
            telemetry = getattr(self, "_native_telemetry", None)
            self._hot_on = not (telemetry is not None and telemetry.enabled())
        return self._hot_on

    async def _serve(self, route: Route, scope: Scope, child: Scope, receive: Receive, send: Send) -> None:
        body = body_framing(scope["headers"], self._body_limit)
        if body == "too_large":
            assert self._reject is not None
            await self._reject(send)
            return
        if body == "chunked":
            await super().__call__(scope, receive, send)
            return
        scope.update(child)
        scope["app"] = self
        if self._hot_stack is None:
            self._hot_stack = self._build_hot_stack()
        scope["distrs.route"] = route
        await self._hot_stack(scope, receive, send)

    def _build_hot_stack(self) -> ServerErrorMiddleware:
        """The two layers a hot route keeps: exception handlers as the exception middleware
        splits them (classes; status codes other than 500), under the server-error layer."""
        classes: dict[Any, Any] = {}
        statuses: dict[int, Any] = {}
        for key, handler in self.exception_handlers.items():
            if key in (500, Exception):
                continue
            (statuses if isinstance(key, int) else classes)[key] = handler
        handlers = (classes, statuses)

        async def run(scope: Scope, receive: Receive, send: Send) -> None:
            scope["starlette.exception_handlers"] = handlers
            await scope["distrs.route"].handle(scope, receive, send)

        error = self.exception_handlers.get(500) or self.exception_handlers.get(Exception)
        return ServerErrorMiddleware(run, handler=error, debug=self.debug)
