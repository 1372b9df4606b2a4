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


def test_rlimits_fallback_warns_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    sb = factory.create_sandbox(_settings(tmp_path))
    assert sb.isolation == RLIMITS
    assert "SANDBOX DEGRADED" in caplog.text and "namespaces refused" in caplog.text


def test_require_isolation_refuses_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    with pytest.raises(SandboxError, match="isolation is required"):
        factory.create_sandbox(_settings(tmp_path, require_isolation=True))


def test_forced_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "probe_bwrap", _probe(False, False))
    assert factory.create_sandbox(_settings(tmp_path, backend="rlimits")).isolation == RLIMITS
    with pytest.raises(SandboxError):
        factory.create_sandbox(_settings(tmp_path, backend="bwrap"))
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        factory.create_sandbox(_settings(tmp_path, backend="docker"))
