"""Client time limits are honoured up to the operator's ceiling: ``run_timeout`` on ``/run_code``
(SandboxFusion runs the program for the time the client asks) and ``time_limit_s`` on ``/v1``
payloads, and a request whose limit is cut is told so, naming the setting. The service here has
a 1 s default and a 3 s ceiling (``DISTRS_JUDGE_TEST_TIME_S``, ``DISTRS_JUDGE_MAX_TEST_TIME_S``)
so the cases stay short."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from distrs_client import RewardClient

from tests.fixtures.service import TRAINER_A, Service, running_service
from tests.integration.compat.framework_sources import verl_sandbox_utils


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    env = {"DISTRS_JUDGE_TEST_TIME_S": "1", "DISTRS_JUDGE_MAX_TEST_TIME_S": "3"}
    with running_service(workers={"run": 1}, env=env) as s:
        yield s


SLEEP_2 = "import time\ntime.sleep(2)\nprint('done')"


def test_run_timeout_above_the_default_is_honoured(svc: Service) -> None:
    """Before, the request's limit could only lower the default: a 2 s program with
    run_timeout 2.5 ended TimeLimitExceeded after the 1 s default."""
    verl = verl_sandbox_utils()
    resp, err = verl.call_sandbox_api(f"{svc.url}/run_code?token={TRAINER_A}", SLEEP_2, None, 10, 2.5, 1024)
    assert err is None and resp is not None
    assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "done\n"
    assert resp["message"] == ""  # nothing was cut


def test_run_timeout_past_the_ceiling_is_cut_and_says_so(svc: Service) -> None:
    body = {"code": "import time\ntime.sleep(5)", "language": "python", "run_timeout": 50}
    resp = requests.post(f"{svc.url}/run_code?token={TRAINER_A}", json=body, timeout=60).json()
    assert resp["run_result"]["status"] == "TimeLimitExceeded"
    assert 2.5 < resp["run_result"]["execution_time"] < 4.5  # the 3 s ceiling, not 50 s nor 1 s
    assert "run_timeout 50 s was cut to 3 s by DISTRS_JUDGE_MAX_TEST_TIME_S" in resp["message"]


def test_v1_time_limit_s_up_to_the_ceiling(svc: Service) -> None:
    tests = [{"stdin": "", "expected_stdout": "done\n"}]
    with RewardClient(svc.url, TRAINER_A) as c:
        ok = c.score("python", {"code": SLEEP_2, "tests": tests, "time_limit_s": 2.5}, task="limits")
        assert (ok.status, ok.score) == ("ok", 1.0) and "limits_cut" not in ok.detail
        cut = c.score("python", {"code": SLEEP_2, "tests": tests, "time_limit_s": 30}, task="limits")
        assert cut.status == "ok"  # 2 s fits in the 3 s it got
        assert cut.detail["limits_cut"] == [
            {
                "field": "time_limit_s",
                "requested_s": 30.0,
                "effective_s": 3.0,
                "setting": "DISTRS_JUDGE_MAX_TEST_TIME_S",
            }
        ]
        default = c.score("python", {"code": SLEEP_2, "tests": tests}, task="limits")
        assert default.status == "timeout"  # no limit asked: the 1 s default
