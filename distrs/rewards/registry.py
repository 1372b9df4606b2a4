"""Which handler runs a (reward type, stage): read off the reward types' descriptors.

A reward type's descriptor (``distrs.core.reward_type.RewardType``) names a handler factory per
stage; the pipeline table holds the descriptors as the pipelines file left them, and without a
table the installed ones are read (``distrs.core.installed``). Besides those:

* a type with ``plugin`` (a scorer ``module:function``: an entry point naming a function, or
  ``plugin:`` in the pipelines YAML) is served at its one stage by
  :class:`distrs.rewards.plugin.PluginHandler`, which runs it in a sandboxed child and never
  imports it in the worker;
* every language of ``distrs/core/languages.yaml`` without a built-in type is served at stage
  ``run`` by :class:`distrs.rewards.language_handler.LanguageRunHandler` where its runtime is
  installed (all of them sharing one compile cache).

A type that names a settings class gets one instance of it, read from the environment when the
factories are made, passed to each of its handlers as ``settings=``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from distrs.core.installed import installed_types
from distrs.core.languages import LANGUAGE_STAGE
from distrs.core.reward_type import HandlerFactory, RewardType
from distrs.core.stages import PipelineTable
from distrs.rewards.base import StageHandler
from distrs.rewards.language_handler import language_handlers
from distrs.rewards.plugin import PluginHandler


def type_handlers(rt: RewardType) -> dict[str, HandlerFactory]:
    """Stage -> handler factory of one reward type (a plugin's at its stage)."""
    if rt.plugin is not None:
        return {rt.stages[0]: functools.partial(PluginHandler, rt.plugin)}
    if rt.settings is None or not rt.handlers:
        return dict(rt.handlers)
    settings = rt.settings()
    return {stage: functools.partial(factory, settings=settings) for stage, factory in rt.handlers.items()}


def registered(table: PipelineTable | None = None) -> dict[tuple[str, str], HandlerFactory]:
    """Every (reward type, stage) this process can serve and its handler factory: the types of
    ``table``, or the installed ones without it."""
    types: Mapping[str, RewardType] = table.reward_types if table is not None else installed_types()
    out: dict[tuple[str, str], HandlerFactory] = {
        (name, LANGUAGE_STAGE): factory
        for name, factory in language_handlers().items()
        if table is None or name in table.reward_types
    }
    for name, rt in types.items():
        out.update({(name, stage): factory for stage, factory in type_handlers(rt).items()})
    return out


def get_handler(reward_type: str, stage: str, table: PipelineTable | None = None) -> StageHandler:
    """A new handler for (reward_type, stage); KeyError naming both when none is registered."""
    factory = registered(table).get((reward_type, stage))
    if factory is None:
        raise KeyError(f"no handler for reward type {reward_type!r} at stage {stage!r}")
    handler: StageHandler = factory()
    return handler
