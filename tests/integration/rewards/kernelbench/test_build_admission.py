"""Builds are admitted by the CPUs they need, and time that is not the candidate's is never its
score: on a pool of fewer CPUs than builds, every build waits its turn, the count in flight never
exceeds the CPUs, and none ends ``timeout`` for the time it waited; a build cut while the machine
gave it too little CPU, or never admitted before the stage's time ran out, is ``internal_error``.

The jails are stand-ins (``build_fakes.py``: processes speaking the compile stage's protocols,
whose builds take a set time); the compile stage, its admission and its limits are the real ones."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.kernelbench import CompileHandler
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.toolchain import Toolchain
from tests.fixtures.kernel_problems import HONEST
from tests.integration.rewards.kernelbench.build_fakes import FakeSandbox


def settings(tmp: Path, **kw: Any) -> KernelSettings:
    base: dict[str, Any] = {
        "device": "cpu",
        "build_cpus": 2,
        "build_jobs": 1,
        "build_cpus_dir": str(tmp / "cpus"),
        "pch": False,
        "prestart": False,
        "compile_time_s": 1.0,
    }
    return KernelSettings(**{**base, **kw})


def candidate(i: int) -> str:
    """The honest candidate, its kernel source made distinct (its own build, no cache hit)."""
    return HONEST.replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// variant {i}")


def compile_one(h: CompileHandler, source: str, timeout_s: float = 60.0) -> StageOutput:
    payload = {"original_model_src": "x", "custom_model_src": source, "backend": "cpp"}
    return h.run(StageInput("r", "t", "kernelbench", "compile", payload, {}, timeout_s))


def test_builds_wait_for_cpus_and_none_is_charged_the_wait(tmp_path: Path) -> None:
    box = FakeSandbox(tmp_path, build_s=0.4)  # six builds, two CPUs: the last admitted after 0.8 s
    outs: list[StageOutput] = []
    toolchain = Toolchain(settings(tmp_path))
    toolchain.key()  # the toolchain's identity, asked once for all six handlers

    def worker(i: int) -> None:  # one compile worker, with its own handler, per candidate
        h = CompileHandler(box, settings(tmp_path))  # type: ignore[arg-type]
        h.toolchain = toolchain
        outs.append(compile_one(h, candidate(i)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [o.outcome for o in outs] == ["next"] * 6, [o.detail for o in outs]
    started, most = box.most_in_flight()
    assert started == 6 and most == 2  # admitted two at a time: never more than the CPUs


def test_a_build_cut_while_the_machine_starves_it_is_the_services_fault(tmp_path: Path) -> None:
    box = FakeSandbox(tmp_path, build_s=3.0)  # past its 1 s wall limit, far from its CPU limit
    out = compile_one(CompileHandler(box, settings(tmp_path)), candidate(0))  # type: ignore[arg-type]
    assert out.status is Status.INTERNAL_ERROR, out
    assert "less CPU" in out.detail["error"]


def test_a_build_that_uses_its_cpu_limit_is_the_candidates_timeout(tmp_path: Path) -> None:
    box = FakeSandbox(tmp_path, build_s=0.1, reply={"ok": False, "cpu_exceeded": True, "cpu_s": 601})
    out = compile_one(CompileHandler(box, settings(tmp_path)), candidate(0))  # type: ignore[arg-type]
    assert out.status is Status.TIMEOUT and out.score == 0.0, out


def test_a_build_never_admitted_before_the_stage_ends_is_the_services_fault(tmp_path: Path) -> None:
    from distrs.rewards.kernelbench.admission import CpuSlots

    box = FakeSandbox(tmp_path, build_s=0.1)
    s = settings(tmp_path)
    held = CpuSlots(str(tmp_path / "cpus"), 2).acquire(2, deadline=float("inf"))
    assert held is not None  # another process's builds hold both CPUs
    try:
        out = compile_one(CompileHandler(box, s), candidate(0), timeout_s=3.0)  # type: ignore[arg-type]
    finally:
        held.release()
    assert out.status is Status.INTERNAL_ERROR, out
    assert "CPUs came free" in out.detail["error"]
    assert not box.log.exists()  # it never started
