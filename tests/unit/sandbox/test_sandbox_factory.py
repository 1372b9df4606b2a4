"""Backend choice: bwrap when the probe passes, no-/proc bwrap, then the loud rlimits fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrs.sandbox import SandboxError, SandboxSettings, factory
from distrs.sandbox.local import BWRAP, RLIMITS, LocalSandbox


def _settings(tmp_path: Path, **kw: object) -> SandboxSettings:
    return SandboxSettings(workdir_base=str(tmp_path), **kw)  # type: ignore[arg-type]


def _probe(ok_with_proc: bool, ok_without_proc: bool):  # type: ignore[no-untyped-def]
    def probe(s: SandboxSettings) -> str | None:
        ok = ok_with_proc if s.mount_proc else ok_without_proc
        return None if ok else "namespaces refused"

    return probe


def test_bwrap_when_probe_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(True, True))
    sb = factory.create_sandbox(_settings(tmp_path))
    assert sb.isolation == BWRAP


def test_bwrap_without_proc_when_proc_is_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, True))
    sb = factory.create_sandbox(_settings(tmp_path))
    assert isinstance(sb, LocalSandbox) and sb.isolation == BWRAP
    assert sb._settings.mount_proc is False


def test_no_silent_fallback_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    with pytest.raises(SandboxError) as e:
        factory.create_sandbox(_settings(tmp_path))
    msg = str(e.value)
    # one line that says why and names the settings to change
    assert "\n" not in msg and "namespaces refused" in msg
    assert "sandbox.mode=seccompProfile" in msg and "sandbox.allowDegraded=true" in msg


def test_degraded_only_when_allowed_and_then_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    sb = factory.create_sandbox(_settings(tmp_path, allow_degraded=True))
    assert sb.isolation == RLIMITS
    assert "SANDBOX DEGRADED" in caplog.text and "namespaces refused" in caplog.text


def test_forced_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    with pytest.raises(SandboxError, match="allowDegraded"):
        factory.create_sandbox(_settings(tmp_path, backend="rlimits"))
    assert (
        factory.create_sandbox(_settings(tmp_path, backend="rlimits", allow_degraded=True)).isolation
        == RLIMITS
    )
    with pytest.raises(SandboxError):
        factory.create_sandbox(_settings(tmp_path, backend="bwrap", allow_degraded=True))
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        factory.create_sandbox(_settings(tmp_path, backend="docker"))


def test_shared_remembers_a_failure_and_readiness_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def failing(settings: SandboxSettings | None = None) -> LocalSandbox:
        calls.append(1)
        raise SandboxError("SANDBOX UNAVAILABLE: no namespaces")

    monkeypatch.setattr(factory, "create_sandbox", failing)
    monkeypatch.setattr(factory, "_shared", None)
    monkeypatch.setattr(factory, "_failure", None)
    assert factory.readiness() == (False, "SANDBOX UNAVAILABLE: no namespaces")
    with pytest.raises(SandboxError):
        factory.shared()
    assert len(calls) == 1  # probed once, not per request
