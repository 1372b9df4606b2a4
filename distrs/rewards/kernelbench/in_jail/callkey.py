"""The identity of one ``load_inline`` call: what it builds, not where or how loudly.

Shared by the host (``compile.py``: the build cache and the shipped modules are keyed by it)
and the jailed children, which load this file by path (``import_candidate.py`` turns a call into
canonical JSON arguments; ``judge_process.py`` finds the shipped module of a call). Standard library
only: it runs where ``distrs`` is not importable.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any

KEY_VERSION = "kb-call/1"
# Arguments that do not change what is built.
IGNORED = frozenset({"build_directory", "verbose", "keep_intermediates"})


def canonical_args(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by name, defaults filled in, as plain JSON values (others as repr)."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    canon = {k: v for k, v in bound.arguments.items() if k not in IGNORED}
    loaded: dict[str, Any] = json.loads(json.dumps(canon, default=repr))
    return loaded


def call_key(canon: dict[str, Any]) -> str:
    """SHA-256 of canonical arguments (from :func:`canonical_args`)."""
    return hashlib.sha256(json.dumps([KEY_VERSION, canon], sort_keys=True).encode()).hexdigest()
