"""A JSON response rendered with orjson (fast, and handles floats/datetimes the same everywhere)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
