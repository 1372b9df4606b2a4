"""The pipeline table: the stages of ``default_pipelines.yaml`` and the installed reward types,
with a YAML file's overrides.

The file format (documented in docs/configuration.md and docs/plugins.md)::

    stages:
      compile: {resource: cpu, timeout_s: 120, cost: 1, resources: {cpu: "4", memory: 16Gi}}
      execute: {resource: gpu, timeout_s: 60, cost: 8, resources: {gpus: 1}}
    reward_types:
      cuda: [compile, execute]                                  # its stages
      kernelbench: {timeouts: {compile: 900}}                   # fields of its descriptor
      exact_match: {plugin: "my_rewards.scoring:exact_match"}   # a scorer, stages default [verify]
      judged_essay: {stages: [run], plugin: "my_rewards.essay:score"}

Reward types come from their descriptors (``core/reward_type.py``), one per entry point of group
``distrs.rewards`` (``core/installed.py``), and from ``languages.yaml`` (every language without a
built-in type is a type with stage ``[run]``). A file's entry for a type overrides the fields it
names (``stages``, ``timeouts``; a list is short for ``stages``) and keeps the rest: the handlers,
the extra, the settings, the route hook. An entry for a type no descriptor declares defines it with
just its stages; ``plugin`` makes the type a scorer plugin at its one stage. Stages given in a file
merge over the defaults field by field. Validation uses pydantic, so a bad file gets an error
naming the field.

A descriptor naming a stage the table lacks is logged and left out, like an entry point that does
not load: one plugin package must not keep the service from starting.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from distrs.core.installed import IMPORT_PATH, PLUGIN_STAGE, installed_types
from distrs.core.languages import LANGUAGE_STAGE, generic_languages
from distrs.core.reward_type import RewardType
from distrs.core.stages import PipelineTable, ResourceClass, StageSpec, WorkerResources

log = logging.getLogger(__name__)


class _Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = Field(0, ge=0)


class _Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource: ResourceClass = ResourceClass.CPU
    timeout_s: float = Field(60.0, gt=0)
    cost: float = Field(1.0, gt=0)
    resources: _Resources = Field(default_factory=_Resources)


class _TypeOverride(BaseModel):
    """A file's entry for one reward type: the descriptor fields it changes."""

    model_config = ConfigDict(extra="forbid")
    stages: list[str] | None = None
    timeouts: dict[str, float] | None = None
    plugin: str | None = None

    @field_validator("plugin")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not IMPORT_PATH.match(v):
            raise ValueError(f"must be an import path 'package.module:function', got {v!r}")
        return v

    @field_validator("timeouts")
    @classmethod
    def _positive(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for stage, t in (v or {}).items():
            if t <= 0:
                raise ValueError(f"{stage}: must be > 0, got {t!r}")
        return v

    @model_validator(mode="after")
    def _one_stage(self) -> _TypeOverride:
        if self.plugin is not None and self.stages is not None and len(self.stages) != 1:
            raise ValueError("a scorer plugin runs at exactly one stage")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stages: dict[str, _Stage] = Field(default_factory=dict)
    reward_types: dict[str, list[str] | _TypeOverride] = Field(default_factory=dict)


def _defaults_text() -> str:
    return resources.files("distrs.core").joinpath("default_pipelines.yaml").read_text()


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A file over the defaults: a stage's fields merge over the default stage's, so ``execute:
    {timeout_s: 300}`` keeps it a GPU stage with its cost and resources; a reward type's entry
    replaces the defaults' entry for it (the descriptor's fields stay underneath either)."""
    out = dict(base)
    for key in ("stages", "reward_types"):
        merged = dict(base.get(key) or {})
        for name, spec in (override.get(key) or {}).items():
            old = merged.get(name)
            if key == "stages" and isinstance(old, dict) and isinstance(spec, dict):
                merged[name] = {**old, **spec}
            else:
                merged[name] = spec
        out[key] = merged
    return out


def overridden(rt: RewardType | None, name: str, spec: list[str] | _TypeOverride) -> RewardType:
    """The descriptor ``rt`` (None: a type of the file's own) with a file's entry over it."""
    o = _TypeOverride(stages=spec) if isinstance(spec, list) else spec
    if o.plugin is not None:
        stages = tuple(o.stages or (PLUGIN_STAGE,))
        return RewardType(name=name, stages=stages, timeouts=o.timeouts or {}, plugin=o.plugin)
    if rt is None:
        if o.stages is None:
            raise ValueError(f"reward_types.{name}: no installed type of that name; give its stages")
        return RewardType(name=name, stages=tuple(o.stages), timeouts=o.timeouts or {})
    stages = tuple(o.stages) if o.stages is not None else rt.stages
    kept = {s: t for s, t in rt.timeouts.items() if s in stages}  # the file's own are checked
    timeouts = {**kept, **(o.timeouts or {})}
    return dataclasses.replace(rt, stages=stages, timeouts=timeouts)


def _served(types: Mapping[str, RewardType], stages: Mapping[str, StageSpec]) -> dict[str, RewardType]:
    out = {}
    for name, rt in types.items():
        unknown = [s for s in rt.stages if s not in stages]
        if unknown:
            log.warning("reward type %r names unknown stage %r; not served", name, unknown[0])
        else:
            out[name] = rt
    return out


def table_from_mapping(data: dict[str, Any]) -> PipelineTable:
    """Build and validate a table from parsed YAML over the installed reward types (raises
    pydantic.ValidationError / ValueError)."""
    parsed = _File.model_validate(data)
    stages = {
        name: StageSpec(
            name=name,
            resource=s.resource,
            timeout_s=s.timeout_s,
            cost=s.cost,
            resources=WorkerResources(cpu=s.resources.cpu, memory=s.resources.memory, gpus=s.resources.gpus),
        )
        for name, s in parsed.stages.items()
    }
    types = dict(installed_types())
    if LANGUAGE_STAGE in stages:  # every language of languages.yaml is a reward type
        for name in generic_languages():
            types.setdefault(name, RewardType(name=name, stages=(LANGUAGE_STAGE,)))
    types = _served(types, stages)
    for name, spec in parsed.reward_types.items():
        types[name] = overridden(types.get(name), name, spec)
    return PipelineTable(stages=stages, reward_types=types)


def load_pipelines(path: str | Path | None = None) -> PipelineTable:
    """The defaults, overlaid with ``path`` when given."""
    base = yaml.safe_load(_defaults_text())
    if path is not None:
        override = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(override, dict):
            raise ValueError(f"{path}: expected a mapping with 'stages' and 'reward_types'")
        base = _merge(base, override)
    return table_from_mapping(base)
