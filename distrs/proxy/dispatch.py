"""How a call reaches its handler: the proxy's one routing layer.

Every route is a FastAPI route (``routes/``), which is what the OpenAPI schema documents and what
answers any call through the full stack. The hottest ones, the worker's lease and completion
routes and the trainer's submission and result routes, are also answered on a **hot path**
(``ProxyApp``), before FastAPI's per-call layers:

**Why.** A lease or a completion through FastAPI passes, before its handler runs, a check for
OpenTelemetry providers (three environment lookups per call, FastAPI's native telemetry), an
exception-telemetry layer, FastAPI's own body-limit layer, the exception middleware (a request
object and a wrapper), an exit stack for dependencies, the router's scan, and then the route's
dependency solver (even for a handler that declares nothing but the request), two more exit
stacks and an endpoint description for error messages: about as much CPU as the handler's own
work (0.77 -> 0.62 ms per request lifecycle with the memory store for the layers alone, measured
A/B; ``benchmarks/proxy_ab.py``), for nothing those routes use.

**Which routes.** Only those FastAPI would add nothing to (``takes_only_request``): no declared
parameter or dependency besides the request, and a handler annotated to return a ``Response``
(so FastAPI would neither serialize nor validate its answer). Such a handler authorizes the call,
reads its body (``body.py``) and its path and query values (``params.py``) itself, with the same
422s naming the field. ``serve_hot`` is given them in match order; each becomes a plain
Starlette ``Route`` with the same path, methods and handler.

**What the hot path keeps of the stack.** On a full match ``ProxyApp`` runs the route itself with:

- the app's exception handlers, looked up exactly as Starlette's exception middleware does (the
  route's own wrapper reads them from the scope);
- Starlette's ``ServerErrorMiddleware`` with the app's ``Exception`` handler, so that a fault is
  answered and logged as on every other route;
- the app's body limit (``app.BodyLimit``'s rule; a chunked body takes the full stack, which
  counts it).

Anything else (another path, a method the route does not take: the stack's 405, a chunked body)
takes the full FastAPI stack to the same handler. With an OpenTelemetry provider configured when
the app starts serving, every call takes the full stack, so that FastAPI's spans and metrics
cover the hot routes too.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
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


def takes_only_request(route: APIRoute) -> bool:
    """Whether FastAPI would resolve nothing for ``route``: the handler's one parameter is the
    request and it returns a ``Response`` itself."""
    d = route.dependant
    declared = (
        d.path_params,
        d.query_params,
        d.header_params,
        d.cookie_params,
        d.body_params,
        d.dependencies,
        route.dependencies,
    )
    if any(declared) or d.request_param_name is None:
        return False
    if d.response_param_name or d.background_tasks_param_name or d.security_scopes_param_name:
        return False
    returns = typing.get_type_hints(route.endpoint).get("return")
    return isinstance(returns, type) and issubclass(returns, Response)


def plain(routes: Iterable[BaseRoute]) -> list[Route]:
    """A Starlette route for each of ``routes`` that ``takes_only_request``, in the same order."""
    out: list[Route] = []
    for r in routes:
        if isinstance(r, APIRoute) and takes_only_request(r):
            endpoint: Any = r.endpoint
            methods = set(r.methods or ())
            route = Route(r.path, endpoint, methods=sorted(methods), name=r.name)
            route.methods = methods  # Starlette adds HEAD to a GET route; FastAPI does not
            out.append(route)
    return out


class ProxyApp(FastAPI):
    """FastAPI with the hot path (module docstring)."""

    _hot: list[Route] | None = None
    _hot_stack: ServerErrorMiddleware | None = None
    _body_limit = 0
    _reject: Callable[[Any], Any] | None = None
    _hot_on: bool | None = None  # decided on the first call (telemetry may be set up late)

    def serve_hot(self, routes: Iterable[BaseRoute], body_limit: int, reject: Callable[[Any], Any]) -> None:
        """Answer those of ``routes`` (routes of this app, in match order) that take only the
        request on the hot path; bodies over ``body_limit`` bytes are answered by
        ``reject(send)``."""
        self._hot, self._body_limit, self._reject = plain(routes), body_limit, reject

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
