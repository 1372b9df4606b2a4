"""Loading the pipeline table from YAML, with built-in defaults.

The file format (documented in docs/configuration.md)::

    stages:
      compile: {resource: cpu, timeout_s: 120, cost: 1, resources: {cpu: "4", memory: 16Gi}}
      execute: {resource: gpu, timeout_s: 60, cost: 8, resources: {gpus: 1}}
    reward_types:
      cuda: [compile, execute]
      exact_match: {plugin: "my_rewards.scoring:exact_match"}          # stages default [verify]
      judged_essay: {stages: [run], plugin: "my_rewards.essay:score"}

A reward type with ``plugin`` is scored by that function (``module:function``) in a sandboxed
child at its one stage (``distrs.rewards.plugin``). Reward types installed as entry points of
group ``distrs.rewards`` that the file and defaults do not name are added with stages
``[verify]``, so installing a plugin package is enough to serve it; so is every language of
``languages.yaml`` without a built-in type, with stages ``[run]``.

Stages and types given in a file are merged over the defaults, so a file only names what it
changes. Validation uses pydantic so a bad file gets an error naming the field.

The plugin import paths of every table built in this process are kept in one mapping
(:func:`declared_plugins`), which the workers' handler registry reads: the table type itself
carries only stages.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from distrs.core.languages import LANGUAGE_STAGE, generic_languages
from distrs.core.stages import PipelineTable, ResourceClass, RewardType, StageSpec, WorkerResources


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


ENTRY_POINT_GROUP = "distrs.rewards"
PLUGIN_STAGE = "verify"
HANDLERS_ATTR = "HANDLERS"
IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_DECLARED: dict[str, tuple[str, str]] = {}


class _PluginType(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stages: list[str] = Field(default_factory=lambda: [PLUGIN_STAGE], min_length=1, max_length=1)
    plugin: str

    @field_validator("plugin")
    @classmethod
    def _path(cls, v: str) -> str:
        if not IMPORT_PATH.match(v):
            raise ValueError(f"must be an import path 'package.module:function', got {v!r}")
        return v


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stages: dict[str, _Stage] = Field(default_factory=dict)
    reward_types: dict[str, list[str] | _PluginType] = Field(default_factory=dict)


def declared_plugins() -> dict[str, tuple[str, str]]:
    """Reward type -> (import path, stage) of every plugin type a table in this process declared."""
    return dict(_DECLARED)


def installed_plugin_types() -> list[str]:
    """Reward types installed as scoring-function entry points of group ``distrs.rewards``.

    Entry points named ``...:HANDLERS`` are stage-handler tables (the built-ins); their stages
    come from the pipelines file, not from here.
    """
    return sorted(
        {
            ep.name
            for ep in entry_points(group=ENTRY_POINT_GROUP)
            if _valid(ep.value) and ep.attr != HANDLERS_ATTR
        }
    )


def _valid(value: str) -> bool:
    return bool(IMPORT_PATH.match(value.strip()))


def _defaults_text() -> str:
    return resources.files("distrs.core").joinpath("default_pipelines.yaml").read_text()


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Reward types are replaced whole; a stage's fields merge over the default stage's, so
    ``execute: {timeout_s: 300}`` keeps it a GPU stage with its cost and resources."""
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


def table_from_mapping(data: dict[str, Any]) -> PipelineTable:
    """Build and validate a table from parsed YAML (raises pydantic.ValidationError / ValueError)."""
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
    types: dict[str, RewardType] = {}
    for name, spec in parsed.reward_types.items():
        if isinstance(spec, _PluginType):
            _DECLARED[name] = (spec.plugin, spec.stages[0])
            types[name] = RewardType(name=name, stages=tuple(spec.stages))
        else:
            types[name] = RewardType(name=name, stages=tuple(spec))
    if PLUGIN_STAGE in stages:
        for name in installed_plugin_types():
            types.setdefault(name, RewardType(name=name, stages=(PLUGIN_STAGE,)))
    if LANGUAGE_STAGE in stages:  # every language of languages.yaml is a reward type
        for name in generic_languages():
            types.setdefault(name, RewardType(name=name, stages=(LANGUAGE_STAGE,)))
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
