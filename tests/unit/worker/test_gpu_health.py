"""GPU health without a GPU: the rules on NVML readings, the guard's states, the worker's use of
it (not ready while sick, one log line, GPU faults are internal_error), and the probe runner."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest

from distrs.core.model import Status
from distrs.metrics import WorkerMetrics
from distrs.rewards.base import StageOutput
from distrs.worker.gpu_health import (
    GpuGuard,
    HealthLimits,
    ProbeResult,
    SubprocessProbe,
    assess,
    check_due,
    cuda_error_in,
    descendant_pids,
)
from distrs.worker.gpu_probe import PTX, expected
from tests.fixtures.gpu import HEALTHY, FakeNvml, FakeProbe, GiB
from tests.unit.worker.test_loop import FakeProxy, Handler, lease, make

LIMITS = HealthLimits(other_memory_bytes=1 * GiB, probe_timeout_s=5, recheck_s=60)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def kinds(state: object, own: tuple[int, ...] = (10,)) -> list[str]:
    return [p.kind for p in assess(state, own, LIMITS)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "want"),
    [
        ({}, []),
        ({"processes": ((77, 2 * GiB),)}, ["other_processes"]),
        ({"processes": ((10, 20 * GiB),)}, []),  # our own child: not another tenant
        ({"processes": ((77, 512 << 20),)}, []),  # under the limit
        ({"processes": None}, []),  # not readable: no verdict from it
        ({"ecc_uncorrected": 3}, ["ecc"]),
        ({"ecc_uncorrected": None}, []),
        ({"retirement_pending": True}, ["retirement_pending"]),
        ({"remap_failed": True}, ["remap_failed"]),
        ({"xids": (79,)}, ["xid"]),
        ({"xids": (13, 31, 43)}, []),  # a faulty program's Xids: the test kernel decides
        ({"xids": (13, 48)}, ["xid"]),
        ({"ecc_uncorrected": 1, "xids": (94,)}, ["ecc", "xid"]),
    ],
)
def test_assess_rules(changes: dict[str, object], want: list[str]) -> None:
    import dataclasses

    assert kinds(dataclasses.replace(HEALTHY, **changes)) == want


def test_assess_messages_name_the_cause() -> None:
    import dataclasses

    (p,) = assess(dataclasses.replace(HEALTHY, processes=((77, 3 * GiB), (78, GiB))), (), LIMITS)
    assert "4.0 GiB" in p.message and "77" in p.message and "78" in p.message
    (p,) = assess(dataclasses.replace(HEALTHY, xids=(79, 79, 13)), (), LIMITS)
    assert p.message == "critical Xid 79"


@pytest.mark.parametrize(
    ("last_ok", "age", "flagged", "want"),
    [
        (None, 0, False, "first"),
        (True, 0, True, "cuda_error"),
        (True, 1e6, False, None),  # a healthy GPU is not re-checked without a reason
        (False, 59, False, None),
        (False, 60, False, "recheck"),
    ],
)
def test_check_due(last_ok: bool | None, age: float, flagged: bool, want: str | None) -> None:
    from distrs.worker.gpu_health import HealthEvent

    last = None if last_ok is None else HealthEvent(at=100.0, trigger="first", ok=last_ok, reason="")
    assert check_due(100.0 + age, last, flagged, 60) == want


@pytest.mark.parametrize(
    ("out", "want"),
    [
        (StageOutput.final(Status.OK, 1.0), False),
        (StageOutput.next({"binary": "x"}), False),
        (StageOutput.final(Status.WRONG_ANSWER, 0.0, tests=[{"stderr": ""}]), False),
        (StageOutput.final(Status.COMPILE_ERROR, 0.0, error="CUDA error in nvcc?"), False),
        (StageOutput.final(Status.RUNTIME_ERROR, 0.0, tests=[{"stderr": "segfault"}]), False),
        (
            StageOutput.final(
                Status.RUNTIME_ERROR, 0.0, tests=[{"stderr": "CUDA error: an illegal memory access"}]
            ),
            True,
        ),
        (StageOutput.final(Status.RUNTIME_ERROR, 0.0, error="cudaErrorLaunchFailure"), True),
        (StageOutput.final(Status.TIMEOUT, 0.0), True),  # a hung kernel looks like this
        (StageOutput.final(Status.INTERNAL_ERROR, 0.0, gpu_fault=True), True),
    ],
)
def test_cuda_error_in(out: StageOutput, want: bool) -> None:
    assert cuda_error_in(out) is want


def guard(nvml: FakeNvml, probe: FakeProbe, clock: Clock | None = None) -> GpuGuard:
    return GpuGuard(nvml, probe, None, LIMITS, clock=clock or Clock(), own_pids=lambda: {10})


def test_guard_not_ready_until_checked_then_ready() -> None:
    nvml, probe = FakeNvml(), FakeProbe()
    g = guard(nvml, probe)
    assert g.ready() == (False, "GPU not checked yet")
    ev = g.maybe_check()
    assert ev is not None and ev.trigger == "first" and ev.ok and probe.calls == 1
    assert g.ready() == (True, "")
    assert g.maybe_check() is None and probe.calls == 1  # a healthy GPU: no further checks


def test_guard_sick_keeps_its_reason_and_recovers_on_recheck() -> None:
    clock = Clock()
    nvml, probe = FakeNvml(), FakeProbe()
    nvml.set(processes=((4242, 5 * GiB),))
    g = guard(nvml, probe, clock)
    ev = g.maybe_check()
    assert ev is not None and not ev.ok and probe.calls == 0  # NVML found it: no kernel launched
    ok, why = g.ready()
    assert not ok and "held by other processes" in why and "5.0 GiB" in why and HEALTHY.uuid in why
    clock.t += 30
    assert g.maybe_check() is None  # not yet time to look again
    clock.t += 30
    nvml.set(processes=((4242, 6 * GiB),))  # same sickness, other numbers
    ev = g.maybe_check()
    assert ev is not None and ev.trigger == "recheck" and not ev.ok
    assert g.ready() == (False, why)  # same words: the worker logs it once
    clock.t += 60
    nvml.set(processes=())
    ev = g.maybe_check()
    assert ev is not None and ev.ok and g.ready() == (True, "") and probe.calls == 1
    assert [e.trigger for e in g.events] == ["first", "recheck", "recheck"]


def test_guard_wrong_kernel_answer_or_nvml_failure_is_sick() -> None:
    g = guard(FakeNvml(), FakeProbe(ProbeResult(False, 0.5, "wrong answer at 12 of 4096 elements")))
    g.maybe_check()
    ok, why = g.ready()
    assert not ok and "test kernel failed: wrong answer" in why
    nvml = FakeNvml()
    nvml.error = "cannot read GPU 0: GPU is lost"
    g = guard(nvml, FakeProbe())
    g.maybe_check()
    ok, why = g.ready()
    assert not ok and "GPU is lost" in why


def test_after_request_keeps_the_models_error_on_a_healthy_gpu() -> None:
    nvml, probe = FakeNvml(), FakeProbe()
    g = guard(nvml, probe)
    g.maybe_check()
    out = StageOutput.final(
        Status.RUNTIME_ERROR, 0.0, tests=[{"stderr": "CUDA error: illegal memory access"}]
    )
    assert g.after_request(out) is out  # checked, healthy: the program's fault stands
    assert probe.calls == 2 and [e.trigger for e in g.events] == ["first", "cuda_error"]
    ok_out = StageOutput.final(Status.OK, 1.0)
    assert g.after_request(ok_out) is ok_out and probe.calls == 2  # no error: no check


def test_after_request_on_a_sick_gpu_is_internal_error_never_a_score() -> None:
    nvml = FakeNvml()
    g = guard(nvml, FakeProbe())
    g.maybe_check()
    nvml.set(xids=(79,))  # fell off the bus during the request
    out = StageOutput.final(
        Status.RUNTIME_ERROR, 0.0, tests=[{"stderr": "CUDA error: unspecified launch failure"}]
    )
    got = g.after_request(out)
    assert got.status is Status.INTERNAL_ERROR and got.score == 0.0
    assert "GPU fault" in got.detail["error"] and "Xid 79" in got.detail["error"]
    assert got.detail["program_status"] == "runtime_error"
    assert g.ready()[0] is False


def gpu_worker(proxy: FakeProxy, handler: Handler, g: GpuGuard, metrics: WorkerMetrics | None = None):  # type: ignore[no-untyped-def]
    return make(proxy, handler, types=["synthetic"], gpu=g, metrics=metrics)


def test_worker_with_a_sick_gpu_leases_nothing_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml()
    nvml.set(ecc_uncorrected=2)
    g = guard(nvml, FakeProbe())
    proxy = FakeProxy([lease(i) for i in range(5)])
    w = gpu_worker(proxy, Handler(StageOutput.final(Status.OK, 1.0)), g)
    assert w.run_once() is False and len(proxy.leases) == 5  # nothing taken, nothing failed
    ok, why = w.readiness()
    assert not ok and "2 uncorrected ECC errors" in why
    caplog.set_level(logging.WARNING)
    t = threading.Thread(target=w.run, kwargs={"idle_backoff_s": 0.01})
    t.start()
    threading.Event().wait(0.3)  # several readiness rounds
    w.request_drain()
    t.join(5)
    said = [r for r in caplog.records if "not ready" in r.getMessage()]
    assert len(said) == 1 and "ECC" in said[0].getMessage()
    assert proxy.completed == [] and len(proxy.leases) == 5


def test_worker_turns_a_gpu_fault_into_internal_error_and_counts_gpu_seconds() -> None:
    nvml = FakeNvml()
    g = guard(nvml, FakeProbe())
    metrics = WorkerMetrics()
    bad = StageOutput.final(
        Status.RUNTIME_ERROR, 0.0, tests=[{"stderr": "CUDA error: an illegal memory access"}]
    )

    class Faulting(Handler):
        def run(self, inp):  # type: ignore[no-untyped-def]
            nvml.set(xids=(48,))  # double-bit ECC error while it ran
            return super().run(inp)

    proxy = FakeProxy([lease(1), lease(2)])
    w = gpu_worker(proxy, Faulting(bad), g, metrics)
    w.max_bundle = 1
    assert w.run_once() is True
    ((_, body),) = proxy.completed
    assert body["result"]["status"] == "internal_error" and body["result"]["score"] == 0.0
    assert "Xid 48" in body["result"]["detail"]["error"]
    assert w.run_once() is False and len(proxy.leases) == 1  # sick now: the next one waits
    got = metrics.registry.get_sample_value("distrs_request_gpu_seconds_count", {"reward_type": "synthetic"})
    assert got == 1.0


def test_subprocess_probe_verdicts(tmp_path: Path) -> None:
    def script(body: str) -> list[str]:
        p = tmp_path / f"p{len(list(tmp_path.iterdir()))}.py"
        p.write_text(body)
        return [sys.executable, str(p)]

    ok = SubprocessProbe(script('print(\'{"ok": true, "kernel_s": 0.1}\')'))(5)
    assert ok.ok and ok.error == ""
    wrong = SubprocessProbe(
        script('import sys; print(\'{"ok": false, "error": "wrong answer at 3 of 4096"}\'); sys.exit(1)')
    )(5)
    assert not wrong.ok and "wrong answer" in wrong.error
    hung = SubprocessProbe(script("import time; time.sleep(30)"))(0.5)
    assert not hung.ok and "did not finish in 0.5 s" in hung.error and hung.seconds < 5
    crashed = SubprocessProbe(script("import os; os.abort()"))(5)
    assert not crashed.ok and "without a verdict" in crashed.error
    # The real probe on a machine without a GPU: no libcuda, so a clear failure, not a hang
    real = SubprocessProbe()(30)
    assert not real.ok and real.error


def test_probe_kernel_text_and_expected_answer() -> None:
    assert PTX.endswith(b"\x00") and b".entry probe" in PTX
    want = expected(4096)
    assert want[0] == 7 and want[3] == 16 and want[4095] == 4095 * 4095 + 7


def test_descendant_pids_include_children(tmp_path: Path) -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        ours = descendant_pids()
        assert child.pid in ours and 1 not in ours
    finally:
        child.kill()
        child.wait()


def test_cli_guards_gpu_stages_only_where_a_gpu_device_exists(tmp_path: Path) -> None:
    from distrs.cli import _gpu_guard
    from distrs.config import WorkerSettings
    from distrs.core.pipeline_config import load_pipelines
    from tests.fixtures.gpu import fake_dev

    table = load_pipelines()
    gpu_stage = WorkerSettings(stage="execute", proxy_url="http://x")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _gpu_guard(gpu_stage, table, str(empty)) == (None, None)  # a GPU stage run without a GPU
    dev = str(fake_dev(tmp_path))
    assert _gpu_guard(WorkerSettings(stage="compile", proxy_url="http://x"), table, dev) == (None, None)
    assert _gpu_guard(WorkerSettings(stage="execute", gpu_health=False), table, dev) == (None, None)
    g, metrics = _gpu_guard(gpu_stage, table, dev)
    assert isinstance(g, GpuGuard) and isinstance(metrics, WorkerMetrics)
    assert g.ready() == (False, "GPU not checked yet")
    g.nvml = FakeNvml()
    g.probe = FakeProbe()
    g.maybe_check()
    assert (
        metrics.registry.get_sample_value(
            "distrs_gpu_health_checks_total", {"trigger": "first", "result": "healthy"}
        )
        == 1.0
    )
    assert metrics.registry.get_sample_value("distrs_gpu_healthy") == 1.0


def test_readyz_answers_at_once_while_a_check_runs() -> None:
    """A slow test kernel (up to probe_timeout_s) must not hold /readyz: it reads the last verdict."""
    started, release = threading.Event(), threading.Event()

    class SlowProbe:
        def __call__(self, timeout_s: float) -> ProbeResult:
            started.set()
            release.wait(5)
            return ProbeResult(True, 2.0)

    g = GpuGuard(FakeNvml(), SlowProbe(), None, LIMITS, clock=Clock(), own_pids=lambda: {10})
    t = threading.Thread(target=g.maybe_check)
    t.start()
    assert started.wait(5)
    answered = []
    r = threading.Thread(target=lambda: answered.append(g.ready()))
    r.start()
    r.join(1)
    assert answered == [(False, "GPU not checked yet")]  # answered while the kernel still runs
    release.set()
    t.join(5)
    assert g.ready() == (True, "")
