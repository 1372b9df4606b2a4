"""The reward types installed in this environment: the entry points of group ``distrs.rewards``.

Built-ins and plugin packages are found the same way; the entry point's name is the reward type's
name, and what it names decides what it is:

* ``module:REWARD_TYPE`` - a :class:`~distrs.core.reward_type.RewardType`, loaded (importing
  ``module``, which holds trusted handlers). The built-ins are declared so in ``pyproject.toml``.
* ``module:HANDLERS`` - a mapping ``{stage: handler factory}``: a type that visits those stages in
  the mapping's order.
* ``module:function`` (any other name) - a scorer plugin ``function(payload) -> float | bool |
  dict``. It is never imported here or in the worker: the type runs it in a sandboxed child at
  stage ``verify`` (``distrs.rewards.plugin``).

Loading imports the modules of the first two kinds (their handlers are classes, nothing starts).
An entry point that fails to load, or loads something else, is logged and skipped: one broken
plugin package must not stop a process serving every other type. The scan runs once per process
(the environment does not change under it); :func:`installed_types.cache_clear` rescans.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points

from distrs.core.reward_type import RewardType

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "distrs.rewards"
DESCRIPTOR_ATTR = "REWARD_TYPE"
HANDLERS_ATTR = "HANDLERS"
PLUGIN_STAGE = "verify"
IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def _loaded(ep: EntryPoint) -> RewardType | None:
    try:
        obj = ep.load()
    except Exception:
        log.exception("reward entry point %s = %s failed to load; skipped", ep.name, ep.value)
        return None
    if ep.attr == DESCRIPTOR_ATTR:
        if not isinstance(obj, RewardType) or obj.name != ep.name:
            log.error("reward entry point %s = %s is not the RewardType named %r", ep.name, ep.value, ep.name)
            return None
        return obj
    if not isinstance(obj, Mapping) or not obj or not all(callable(f) for f in obj.values()):
        log.error("reward entry point %s = %s is not a {stage: handler factory} mapping", ep.name, ep.value)
        return None
    return RewardType(name=ep.name, stages=tuple(str(s) for s in obj), handlers=dict(obj))


def entry_point_type(ep: EntryPoint) -> RewardType | None:
    """The reward type one entry point declares (None, logged, where it declares none)."""
    if not IMPORT_PATH.match(ep.value.strip()):
        log.error("reward entry point %s = %r is not 'module:attribute'; skipped", ep.name, ep.value)
        return None
    if ep.attr in (DESCRIPTOR_ATTR, HANDLERS_ATTR):
        return _loaded(ep)
    return RewardType(name=ep.name, stages=(PLUGIN_STAGE,), plugin=ep.value.strip())


@functools.cache
def installed_types() -> dict[str, RewardType]:
    """Every reward type an installed distribution declares, by name."""
    out: dict[str, RewardType] = {}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        rt = entry_point_type(ep)
        if rt is not None:
            out[rt.name] = rt
    return out
