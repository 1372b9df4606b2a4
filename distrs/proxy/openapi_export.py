"""A part of the proxy's OpenAPI document, for the docs (``distrs config openapi``).

The proxy serves its whole schema at ``/openapi.json``; docs/sessions-openapi.json is the part a
session user needs (the session routes and the schemas they reference), generated from the app
itself so it cannot drift (a unit test compares them).
"""

from __future__ import annotations

import json
from typing import Any

from distrs.config import ProxySettings


def openapi_part(prefixes: tuple[str, ...]) -> dict[str, Any]:
    """The OpenAPI document of the routes under ``prefixes``, with the schemas they reference."""
    from distrs.proxy.app import create_app

    app = create_app(ProxySettings(insecure=True))
    doc = app.openapi()
    paths = {p: v for p, v in doc["paths"].items() if p.startswith(prefixes)}
    schemas = doc.get("components", {}).get("schemas", {})
    for op in (o for v in paths.values() for o in v.values()):  # body schemas keep nested models in $defs
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        for name, sub in body.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
    wanted: dict[str, Any] = {}
    todo = [json.dumps(paths)]
    while todo:
        text = todo.pop()
        for name, schema in schemas.items():
            if f'"#/components/schemas/{name}"' in text and name not in wanted:
                wanted[name] = schema
                todo.append(json.dumps(schema))
    return {
        "openapi": doc["openapi"],
        "info": {**doc["info"], "title": "DistRS sessions"},
        "paths": paths,
        "components": {"schemas": dict(sorted(wanted.items()))},
    }


def render_openapi(prefixes: tuple[str, ...] = ("/v1/sessions", "/v1/session-ops")) -> str:
    return json.dumps(openapi_part(prefixes), indent=2, sort_keys=True) + "\n"
