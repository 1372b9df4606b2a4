"""Reward types that need an optional extra of the ``distrs`` distribution.

``kernelbench`` needs torch and ninja (``pip install 'distrs[kernels]'``), several GB that most
installs never use. A worker left to serve every type of its stage skips a type whose extra is
missing (it would otherwise be not ready for all the others), and ``GET /v1/reward-types`` says
such a type is not ready and names the extra. Requests of that type then end ``internal_error``
naming it, never a score.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str
    modules: tuple[str, ...]


EXTRAS: dict[str, Extra] = {"kernelbench": Extra("kernels", ("torch", "ninja"))}


def missing_extra(reward_type: str) -> str | None:
    """Why ``reward_type`` cannot run in this interpreter, or None when nothing is missing."""
    extra = EXTRAS.get(reward_type)
    if extra is None:
        return None
    absent = [m for m in extra.modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return (
        f"needs the '{extra.name}' extra ({', '.join(absent)} not installed): "
        f"pip install 'distrs[{extra.name}]'"
    )
