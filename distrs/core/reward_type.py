"""A reward type, whole: the one object that defines it (its descriptor).

Everything the service knows about a reward type is one :class:`RewardType`: the stages a request
of it visits, in order, with the type's own default timeout at any of them; the handler factory
that runs each stage on a worker; the optional extra it needs and how to tell whether it is
installed; the settings class its handlers read; a route hook for a type whose requests skip
stages; or, for a scorer plugin, the ``module:function`` run in a sandboxed child instead of
handlers.

Each entry point of group ``distrs.rewards`` yields one (``core/installed.py``); the pipelines
YAML overrides its fields (``core/pipeline_config.py``); the pipeline table holds the result, so
the proxy, the planner and the workers read the same object. docs/plugins.md shows how to write
one.

Pure: handler factories and settings classes are only held here, never called.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HandlerFactory = Callable[..., Any]
"""Makes one stage handler (``distrs.rewards.base.StageHandler``); called with ``settings=`` an
instance of the type's settings class where the type names one."""

RouteHook = Callable[[Sequence[str], Mapping[str, Any]], Sequence[str]]
"""``route(stages, payload)``: the stages (a non-empty ordered subset of ``stages``, the type's
stages as the pipeline table has them) one request visits."""


@dataclass(frozen=True)
class Extra:
    """An optional extra of the ``distrs`` distribution (``pip install 'distrs[NAME]'``) and the
    modules it installs. A worker left to serve every type of its stage skips a type whose extra
    is missing, and ``GET /v1/reward-types`` says it is not ready and names the extra."""

    name: str
    modules: tuple[str, ...]

    def missing(self) -> str | None:
        """Why the type cannot run in this interpreter, or None when every module is installed."""
        absent = [m for m in self.modules if importlib.util.find_spec(m) is None]
        if not absent:
            return None
        return (
            f"needs the '{self.name}' extra ({', '.join(absent)} not installed): "
            f"pip install 'distrs[{self.name}]'"
        )


@dataclass(frozen=True)
class RewardType:
    """One reward type (see the module docstring). Only ``name`` and ``stages`` are required."""

    name: str
    stages: tuple[str, ...]
    handlers: Mapping[str, HandlerFactory] = field(default_factory=dict)
    """Stage -> handler factory (trusted code the worker runs)."""
    timeouts: Mapping[str, float] = field(default_factory=dict)
    """Stage -> this type's own timeout there (T_j), where it differs from the stage's."""
    extra: Extra | None = None
    """The optional extra of the ``distrs`` distribution the handlers need."""
    settings: type[Any] | None = None
    """The handlers' settings class (pydantic-settings); built once per worker and passed to each."""
    route: RouteHook | None = None
    """Which of the stages a request visits; None: every one."""
    plugin: str | None = None
    """``module:function``: a scorer run in a sandboxed child at the type's one stage."""

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError(f"reward type {self.name!r} has no stages")
        if len(set(self.stages)) != len(self.stages):
            raise ValueError(f"reward type {self.name!r} names a stage twice: {list(self.stages)}")
        for stage, t in self.timeouts.items():
            if stage not in self.stages:
                raise ValueError(f"reward type {self.name!r}: timeout for {stage!r}, not one of its stages")
            if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
                raise ValueError(f"reward type {self.name!r}: timeout for {stage!r} must be > 0, got {t!r}")
        if self.plugin is not None and len(self.stages) != 1:
            raise ValueError(f"reward type {self.name!r}: a scorer plugin runs at exactly one stage")

    def visits(self, payload: Mapping[str, Any]) -> list[str]:
        """The stages a request with ``payload`` visits, in order (the route hook's choice, checked)."""
        if self.route is None:
            return list(self.stages)
        chosen = list(self.route(self.stages, payload))
        order = [s for s in self.stages if s in chosen]
        if not chosen or order != chosen:
            raise ValueError(
                f"reward type {self.name!r}: route {chosen} is not an ordered subset of {list(self.stages)}"
            )
        return chosen
