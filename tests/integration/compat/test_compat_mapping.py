"""The pure mappings behind the compatibility routes (no processes needed)."""

from __future__ import annotations

import pytest

from distrs.core.model import Result, Status
from distrs.proxy.routes.compat import reward_payload
from distrs.proxy.routes.sandboxfusion import (
    RunCodeRequest,
    _return_code,
    run_code_payload,
    to_run_code_response,
)


def test_run_code_payload_is_one_exact_empty_output_case() -> None:
    p = run_code_payload(RunCodeRequest(code="x", stdin="in", run_timeout=3, memory_limit_MB=256))
    assert p["tests"] == [{"stdin": "in", "expected_stdout": ""}]
    assert p["compare"] == "exact" and p["time_limit_s"] == 3 and p["memory_limit_mb"] == 256
    assert "memory_limit_mb" not in run_code_payload(RunCodeRequest(code="x"))  # -1 = no limit given


def test_a_raw_run_detail_is_used_verbatim() -> None:
    raw = {"stdout": "a" * 5000, "stderr": "warn", "return_code": 0, "execution_time": 0.5}
    r = Result(request_id="r", status=Status.OK, detail={"run": raw})
    out = to_run_code_response(r, compiled=True)
    assert out.status == "Success" and out.run_result is not None
    assert out.run_result.stdout == "a" * 5000 and out.run_result.stderr == "warn"
    assert out.compile_result is not None and out.compile_result.return_code == 0


@pytest.mark.parametrize(
    ("status", "detail", "sf_status", "run_status"),
    [
        (Status.WRONG_ANSWER, {"tests": [{"status": "wrong_answer", "time_s": 0.1, "stdout": "hi\n"}]}, "Success", "Finished"),
        (Status.TIMEOUT, {"tests": [{"status": "timeout", "time_s": 1.0}]}, "Failed", "TimeLimitExceeded"),
        (Status.RUNTIME_ERROR, {"tests": [{"status": "runtime_error", "reason": "killed by signal 9"}]}, "Failed", "Finished"),
    ],
)  # fmt: skip
def test_judged_details_map_to_sandboxfusion(
    status: Status, detail: dict, sf_status: str, run_status: str
) -> None:
    out = to_run_code_response(Result(request_id="r", status=status, detail=detail), compiled=False)
    assert out.status == sf_status and out.run_result is not None and out.run_result.status == run_status
    assert out.compile_result is None


def test_service_failures_are_sandbox_errors() -> None:
    for st in (Status.INTERNAL_ERROR, Status.INVALID):
        out = to_run_code_response(
            Result(request_id="r", status=st, detail={"error": "boom"}), compiled=False
        )
        assert out.status == "SandboxError" and "boom" in out.message


def test_compile_timeout() -> None:
    r = Result(request_id="r", status=Status.TIMEOUT, detail={"stage": "compile"})
    out = to_run_code_response(r, compiled=True)
    assert out.compile_result is not None and out.compile_result.status == "TimeLimitExceeded"
    assert out.run_result is None


@pytest.mark.parametrize(
    ("reason", "code"), [("exit 3", 3), ("exited with code 2", 2), ("killed by signal 9", 137), ("odd", 1)]
)
def test_return_code_from_reason(reason: str, code: int) -> None:
    assert _return_code(reason) == code


def test_openrlhf_payloads() -> None:
    assert reward_payload("math", "x = 4", 4) == {"completion": "x = 4", "ground_truth": "4"}
    p = reward_payload("python", "a\n```python\nprint(1)\n```\n", '[{"stdin": "", "expected_stdout": "1"}]')
    assert p == {"code": "print(1)\n", "tests": [{"stdin": "", "expected_stdout": "1"}]}


def test_a_cut_time_limit_is_said_in_the_message_with_its_setting() -> None:
    cut = [
        {
            "field": "time_limit_s",
            "requested_s": 50,
            "effective_s": 30,
            "setting": "DISTRS_JUDGE_MAX_TEST_TIME_S",
        }
    ]
    raw = {"stdout": "", "stderr": "", "return_code": None, "timed_out": True, "execution_time": 30.0}
    out = to_run_code_response(
        Result(request_id="r", status=Status.TIMEOUT, detail={"run": raw, "limits_cut": cut}), False
    )
    assert out.message == "run_timeout 50 s was cut to 30 s by DISTRS_JUDGE_MAX_TEST_TIME_S"
    assert out.run_result is not None and out.run_result.status == "TimeLimitExceeded"
