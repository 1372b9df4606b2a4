"""Loading the pipeline table from YAML, with built-in defaults.

The file format (documented in docs/configuration.md)::

    stages:
      compile: {resource: cpu, timeout_s: 120, cost: 1, resources: {cpu: "4", memory: 16Gi}}
      execute: {resource: gpu, timeout_s: 60, cost: 8, resources: {gpus: 1}}
    reward_types:
      cuda: [compile, execute]

Stages and types given in a file are merged over the defaults, so a file only names what it
changes. Validation uses pydantic so a bad file gets an error naming the field.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

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


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stages: dict[str, _Stage] = Field(default_factory=dict)
    reward_types: dict[str, list[str]] = Field(default_factory=dict)


def _defaults_text() -> str:
    return resources.files("distrs.core").joinpath("default_pipelines.yaml").read_text()


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key in ("stages", "reward_types"):
        merged = dict(base.get(key) or {})
        merged.update(override.get(key) or {})
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
    types = {name: RewardType(name=name, stages=tuple(st)) for name, st in parsed.reward_types.items()}
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
