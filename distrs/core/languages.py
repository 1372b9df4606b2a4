"""Languages as data: the table in ``languages.yaml``, parsed and validated.

A language is a source file name, an optional compile command, a run command and the runtime
executable that must be installed; the judged pipeline runs any of them the same way (compile
once, run once per test case, compare). ``python`` and ``cpp`` name the built-in reward types that
serve them; every other language is its own reward type with one ``run`` stage
(``distrs.rewards.language_handler``). ``/run_code`` maps SandboxFusion's language names
(``aliases``) onto this table. Pure: reads only the package's own data file.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

LANGUAGE_STAGE = "run"


class LanguageSpec(BaseModel):
    """One language of ``languages.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    compile: tuple[str, ...] | None = None
    run: tuple[str, ...] = Field(min_length=1)
    runtime: str
    reward_type: str | None = None
    memory: Literal["as", "data"] = "as"
    mounts: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    self_exe: str | None = None
    needs_proc: bool = False
    aliases: tuple[str, ...] = ()


@functools.cache
def language_table() -> dict[str, LanguageSpec]:
    """Every shipped language by its canonical name."""
    raw = yaml.safe_load(resources.files("distrs.core").joinpath("languages.yaml").read_text())
    return {str(name): LanguageSpec.model_validate(spec) for name, spec in raw.items()}


def find_language(name: str) -> tuple[str, LanguageSpec] | None:
    """(canonical name, spec) for a name or alias, case-insensitively; None when unknown."""
    key = name.strip().lower()
    for canon, spec in language_table().items():
        if key == canon.lower() or key in (a.lower() for a in spec.aliases):
            return canon, spec
    return None


def language_reward_type(canon: str, spec: LanguageSpec) -> str:
    """The reward type that serves a language: its built-in type, else the language's name."""
    return spec.reward_type or canon


def generic_languages() -> dict[str, LanguageSpec]:
    """Languages served by the generic handler (no built-in reward type)."""
    return {n: s for n, s in language_table().items() if s.reward_type is None}
