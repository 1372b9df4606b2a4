"""The limits a judged program runs under: per test case, and what a payload asked for but did
not get (``limits_cut``, reported in the result and carried from the compile stage to the run
stage as an artifact)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from distrs.rewards.base import MiB, budget_of
from distrs.rewards.judge.payload import JudgedPayload
from distrs.rewards.judge.settings import JudgeSettings
from distrs.sandbox import Limits


def case_limits(p: JudgedPayload, settings: JudgeSettings, base: Limits) -> Limits:
    """Per-test limits: ``base`` with the time, memory and output limits of the settings. The
    payload's time limit is honoured up to ``max_test_time_s`` (the default is ``test_time_s``),
    and its memory limit up to ``max_memory_mb`` (as SandboxFusion's ``memory_limit_MB``);
    memory stays unlimited where ``base`` leaves it so."""
    wall = min(p.time_limit_s or settings.test_time_s, settings.max_test_time_s)
    mem_mb = min(settings.max_memory_mb, p.memory_limit_mb) if p.memory_limit_mb else settings.memory_mb
    mem = None if base.memory_bytes is None else mem_mb * MiB
    return replace(base, wall_s=wall, cpu_s=wall, memory_bytes=mem, output_bytes=settings.output_bytes)


LIMITS_CUT_ARTIFACT = "limits_cut"  # the compile stage's cuts, carried to the run stage (JSON)


def limit_cuts(
    p: JudgedPayload,
    settings: JudgeSettings,
    stage: str,
    stage_timeout_s: float,
    *,
    compiles: bool = False,
    runs: bool = True,
    earlier: str | None = None,
) -> dict[str, Any]:
    """``{"limits_cut": [...]}`` when the payload asked for more time than it gets: one entry per
    cut limit with the field, what was asked, what applies and the setting that decided it
    (``DISTRS_JUDGE_MAX_TEST_TIME_S``, ``DISTRS_JUDGE_COMPILE_TIME_S`` or the stage's
    ``timeout_s``); ``{}`` otherwise. ``compiles``/``runs``: this stage runs the compile step /
    the tests; ``earlier``: the cuts an earlier stage reported (its ``limits_cut`` artifact)."""
    budget = budget_of(stage_timeout_s)
    stage_setting = f"stages.{stage}.timeout_s (pipelines: {stage_timeout_s:g} s)"
    asked: list[tuple[str, float | None, float, str]] = []
    if runs:
        asked.append(
            ("time_limit_s", p.time_limit_s, settings.max_test_time_s, "DISTRS_JUDGE_MAX_TEST_TIME_S")
        )
    if compiles:
        asked.append(
            (
                "compile_time_limit_s",
                p.compile_time_limit_s,
                settings.compile_time_s,
                "DISTRS_JUDGE_COMPILE_TIME_S",
            )
        )
    cuts: list[dict[str, Any]] = []
    if earlier:
        try:
            prior = json.loads(earlier)
        except ValueError:
            prior = []
        cuts += [c for c in prior if isinstance(c, dict)] if isinstance(prior, list) else []
    for name, want, ceiling, setting in asked:
        if want is None:
            continue
        got = min(want, ceiling, budget)
        if got < want:
            cuts.append(
                {
                    "field": name,
                    "requested_s": want,
                    "effective_s": round(got, 3),
                    "setting": setting if ceiling <= budget else stage_setting,
                }
            )
    return {"limits_cut": cuts} if cuts else {}
