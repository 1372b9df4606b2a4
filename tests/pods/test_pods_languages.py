"""Every shipped language through SandboxFusion's ``/run_code``, inside the worker image.

The host may lack a language's runtime (its own tests then skip); the worker image never does:
here each language must print hello, double a number read from stdin, fail a source that does not
compile (or parse) with SandboxFusion's statuses, and hit its time limit — through the release as
users deploy it (tests/pods/cluster.py). User-namespaced worker pods (procMount Unmasked) give each
jail a /proc of its own; under the default, non-root mode the container's masked /proc cannot be
remounted, and every language but C# (Mono needs /proc/self/maps) is checked there: the JVM
languages, rustc and Racket get a static /proc/self/exe (languages.yaml ``self_exe``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from distrs.core.languages import find_language, language_table
from tests.integration.sandbox.language_programs import PROGRAMS
from tests.pods.cluster import System, auth_header

pytestmark = [pytest.mark.pods, pytest.mark.timeout(1800)]

# SandboxFusion's names where they differ from ours.
SF_NAME = {"kotlin": "kotlin_script"}
LANGS = sorted(n for n in PROGRAMS if n != "pytest")
VALUES: dict[str, Any] = {
    "proxy": {"replicas": 1},
    "planner": {"intervalSeconds": 1, "workerStartSeconds": 0},
    "workers": {"stages": {"execute": {"enabled": False}, "verify": {"enabled": False}}},
}


def _call(s: System, lang: str, code: str, stdin: str | None, run_timeout: float = 10) -> dict[str, Any]:
    body = {
        "code": code,
        "stdin": stdin,
        "language": SF_NAME.get(lang, lang),
        "compile_timeout": 90,
        "run_timeout": run_timeout,
    }
    r = httpx.post(f"{s.proxy_url}/run_code", json=body, headers=auth_header(s.trainer_token), timeout=600)
    assert r.status_code == 200, (lang, r.status_code, r.text)
    return dict(r.json())


def _check(s: System, lang: str) -> str | None:
    """None when the language behaves, else what went wrong."""
    found = find_language(lang)
    if found is None:
        return "not in the languages table"
    compiled = found[1].compile is not None
    progs = PROGRAMS[lang]
    hello = _call(s, lang, progs["hello"], None)
    if hello["status"] != "Success" or (hello["run_result"] or {}).get("stdout", "").strip() != "hello":
        return f"hello: {hello}"
    if (hello["compile_result"] is not None) != compiled:
        return f"hello: compile_result {hello['compile_result']}"
    doubled = _call(s, lang, progs["stdin"], "21\n")
    if doubled["status"] != "Success" or doubled["run_result"]["stdout"].strip() != "42":
        return f"stdin: {doubled}"
    broken = _call(s, lang, progs["broken"], None)
    if broken["status"] != "Failed":
        return f"broken: {broken}"
    if compiled and (broken["run_result"] is not None or broken["compile_result"]["return_code"] == 0):
        return f"broken: {broken}"
    loop = _call(s, lang, progs["loop"], None, run_timeout=1)
    if loop["status"] != "Failed" or (loop["run_result"] or {}).get("status") != "TimeLimitExceeded":
        return f"loop: {loop}"
    return None


# Languages whose runtime cannot run without /proc (languages.yaml needs_proc: C#).
NEED_PROC = {name for name, spec in language_table().items() if spec.needs_proc}


def _run_all(s: System, langs: list[str]) -> dict[str, str]:
    with ThreadPoolExecutor(4) as pool:
        outcomes = dict(zip(langs, pool.map(lambda lang: _check(s, lang), langs), strict=True))
    return {lang: why for lang, why in outcomes.items() if why is not None}


def test_every_language_in_the_worker_image(pod_system: Callable[..., System]) -> None:
    s = pod_system({**VALUES, "sandbox": {"mode": "userNamespace"}})
    failed = _run_all(s, LANGS)
    assert not failed, failed


def test_languages_without_proc_under_the_default_mode(pod_system: Callable[..., System]) -> None:
    s = pod_system(VALUES)
    failed = _run_all(s, [lang for lang in LANGS if lang not in NEED_PROC])
    assert not failed, failed
