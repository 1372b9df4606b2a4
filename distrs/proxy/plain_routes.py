"""Plain Starlette routes in front of the hot FastAPI routes: the same handlers, without FastAPI's
per-call machinery.

A FastAPI route runs, on every call, its dependency solver (even for a handler that declares
nothing but the request), two exit stacks, telemetry hooks and an endpoint description for error
messages: on a lease or a completion that cost about as much CPU as the handler's own work. The
proxy's hottest handlers take the raw request and do their own checks (authorization, body
validation with the same 422s naming the field, path ids), so FastAPI resolves nothing for them.
``plain`` gives each such route a Starlette ``Route`` with the same path, methods and handler;
the app puts these ahead of its other routes, so they answer every call. The FastAPI routes stay
registered behind them, unreachable by a call, for the OpenAPI schema (``/docs``) only.

Only routes FastAPI would add nothing to are taken: no declared parameter or dependency besides
the request, and a handler annotated to return a ``Response`` (so FastAPI would not serialize or
validate its answer). Errors are raised and answered as before: Starlette's route runs the app's
exception handlers the same way.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import BaseRoute, Route


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
