"""docs/configuration.md is the env-var registry; it must match the settings classes."""

from pathlib import Path

from distrs.commands.config import render

ROOT = Path(__file__).resolve().parents[3]


def test_configuration_doc_is_current() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == render(), (
        "run: distrs config docs --out docs/configuration.md"
    )


def test_every_setting_is_documented() -> None:
    text = render()
    for name in ("DISTRS_REDIS_URL", "DISTRS_LEASE_TTL_S", "DISTRS_HEALTH_PORT", "DISTRS_MAX_EXTRA_DELAY_S"):
        assert f"`{name}`" in text
