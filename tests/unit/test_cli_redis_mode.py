"""``--redis-mode`` on the process commands: sentinel is accepted, anything else is refused naming
the option, and a Sentinel URL that does not fit the mode stops the process before it starts."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from distrs.cli import app

runner = CliRunner()


def test_an_unknown_redis_mode_is_refused_naming_the_option_and_the_modes() -> None:
    result = runner.invoke(app, ["proxy", "--redis", "redis://r:6379/0", "--redis-mode", "sentinels"])
    assert result.exit_code == 2
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())  # the error box, unwrapped
    assert "--redis-mode" in text and "standalone, cluster, sentinel" in text, text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--redis", "redis+sentinel://s1:26379/mymaster"], "set DISTRS_REDIS_MODE=sentinel"),
        (
            ["--redis", "redis://r:6379/0", "--redis-mode", "sentinel"],
            "DISTRS_REDIS_URL (redis_url) in sentinel",
        ),
        (["--redis", "redis+sentinel://s1:26379", "--redis-mode", "sentinel"], "primary's name"),
    ],
)
def test_a_sentinel_url_that_does_not_fit_the_mode_stops_the_planner_before_it_starts(
    args: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("DISTRS_REDIS_URL", "DISTRS_REDIS_MODE"):
        monkeypatch.delenv(var, raising=False)
    result = runner.invoke(app, ["planner", *args])
    assert isinstance(result.exception, ValidationError)
    assert says in str(result.exception)
