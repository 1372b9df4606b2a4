"""``GET /v1/reward-types``: every type with its stages and whether it can run here."""

from __future__ import annotations

import pytest

from tests.unit.core.test_extras import no_torch  # noqa: F401  (fixture)
from tests.unit.proxy.conftest import Api


@pytest.mark.usefixtures("no_torch")
async def test_reward_types_route_says_not_ready(api: Api) -> None:
    body = (await api.trainer.get("/v1/reward-types")).json()["reward_types"]
    assert body["kernelbench"]["ready"] is False and "distrs[kernels]" in body["kernelbench"]["reason"]
    assert body["kernelbench"]["stages"] == ["compile", "execute"]
    assert body["cpp"]["ready"] is True and "reason" not in body["cpp"]
