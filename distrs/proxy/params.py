"""Path and query parameters of a plain handler, checked as FastAPI checks declared ones.

A plain handler (``dispatch.py``) declares no parameters, so FastAPI checks none: it reads
them here instead. Each value goes through the same pydantic constraint FastAPI would apply and
a failure becomes the same error (location ``path``/``query`` and name, pydantic's message and
type); every parameter is read before any error is raised, so a call with several bad values
gets one 422 naming the first and counting the rest (``errors.from_errors``), as before.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Request
from pydantic import Field, TypeAdapter, ValidationError

from distrs.proxy.errors import from_errors
from distrs.proxy.schemas import ID_PATTERN

T = TypeVar("T")

# An id in a path (``schemas.ID_PATTERN``).
ID: TypeAdapter[str] = TypeAdapter(Annotated[str, Field(pattern=ID_PATTERN)])


class Found:
    """Collects the parameters of one call and the errors of the invalid ones."""

    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []

    def _check(self, where: str, name: str, value: Any, adapter: TypeAdapter[T], default: T) -> T:
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            self.errors += [{**e, "loc": (where, name, *e["loc"])} for e in exc.errors()]
            return default

    def path(self, request: Request, name: str, adapter: TypeAdapter[str]) -> str:
        return self._check("path", name, request.path_params[name], adapter, "")

    def query(self, request: Request, name: str, adapter: TypeAdapter[T], default: T) -> T:
        value = request.query_params.get(name)
        return default if value is None else self._check("query", name, value, adapter, default)

    def check(self) -> None:
        """422 naming the first invalid parameter, when there is one."""
        if self.errors:
            raise from_errors(self.errors)
