"""Which handler runs a (reward type, stage): built-ins and plugins are found the same way.

Every reward type is an entry point of group ``distrs.rewards`` (its name is the reward type):

* ``module:HANDLERS`` - a mapping ``{stage: handler factory}`` of trusted stage handlers that run
  in the worker. The built-ins (``cpp``, ``cuda``, ``math``, ``python``, ``synthetic``) are
  declared this way in ``pyproject.toml``; nothing imports them for a side effect any more.
* ``module:function`` - a plugin scorer ``function(payload) -> float | bool | dict``. It is never
  imported by the worker: :class:`distrs.rewards.plugin.PluginHandler` runs it in a sandboxed
  child at stage ``verify``, with the stage deadline.

Every language of ``distrs/core/languages.yaml`` without a built-in type is served at stage
``run`` by :class:`distrs.rewards.language_handler.LanguageRunHandler` where its runtime is
installed.

A reward type whose pipelines YAML entry names ``plugin: "module:function"`` is served by the
same :class:`PluginHandler` at its one stage. Tests and embedders may also add a factory
in-process with :func:`register`.

An entry point that fails to load is logged and skipped: one broken plugin package must not stop
a worker serving every other type.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points

from distrs.core.languages import LANGUAGE_STAGE
from distrs.core.pipeline_config import (
    ENTRY_POINT_GROUP,
    HANDLERS_ATTR,
    IMPORT_PATH,
    PLUGIN_STAGE,
    declared_plugins,
)
from distrs.rewards.base import HandlerFactory, StageHandler
from distrs.rewards.language_handler import language_handlers
from distrs.rewards.plugin import PluginHandler

log = logging.getLogger(__name__)

_EXTRA: dict[tuple[str, str], HandlerFactory] = {}


def register(reward_type: str, stage: str) -> Callable[[HandlerFactory], HandlerFactory]:
    """Decorator adding a handler factory for (reward_type, stage) in this process."""

    def deco(factory: HandlerFactory) -> HandlerFactory:
        _EXTRA[(reward_type, stage)] = factory
        return factory

    return deco


def _handler_table(ep: EntryPoint) -> dict[tuple[str, str], HandlerFactory]:
    try:
        table = ep.load()
    except Exception:
        log.exception("reward entry point %s = %s failed to load; skipped", ep.name, ep.value)
        return {}
    if not isinstance(table, Mapping) or not all(callable(f) for f in table.values()):
        log.error("reward entry point %s = %s is not a {stage: handler factory} mapping", ep.name, ep.value)
        return {}
    return {(ep.name, str(stage)): factory for stage, factory in table.items()}


@functools.cache
def _installed() -> dict[tuple[str, str], HandlerFactory]:
    out: dict[tuple[str, str], HandlerFactory] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if not IMPORT_PATH.match(ep.value.strip()):
            log.error("reward entry point %s = %r is not 'module:attribute'; skipped", ep.name, ep.value)
            continue
        if ep.attr == HANDLERS_ATTR:
            out.update(_handler_table(ep))
        else:
            out[(ep.name, PLUGIN_STAGE)] = functools.partial(PluginHandler, ep.value)
    return out


def registered() -> dict[tuple[str, str], HandlerFactory]:
    """Every (reward type, stage) this process can serve and its handler factory."""
    out: dict[tuple[str, str], HandlerFactory] = {
        (name, LANGUAGE_STAGE): factory for name, factory in language_handlers().items()
    }
    out.update(_installed())
    for name, (path, stage) in declared_plugins().items():
        out[(name, stage)] = functools.partial(PluginHandler, path)
    out.update(_EXTRA)
    return out


def get_handler(reward_type: str, stage: str) -> StageHandler:
    """A new handler for (reward_type, stage); KeyError naming both when none is registered."""
    factory = registered().get((reward_type, stage))
    if factory is None:
        raise KeyError(f"no handler for reward type {reward_type!r} at stage {stage!r}")
    return factory()
