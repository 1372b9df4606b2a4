from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.service import Service, running_service


@pytest.fixture(scope="package")
def compat_service() -> Iterator[Service]:
    """Proxy plus one worker per stage the python, cpp and math types use."""
    with running_service(workers={"run": 1, "compile": 1, "verify": 1}) as svc:
        yield svc
