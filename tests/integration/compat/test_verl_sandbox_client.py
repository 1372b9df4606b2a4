"""``POST /run_code`` called by verl 0.9.1's own sandbox client
(``verl.utils.reward_score.sandbox_fusion.utils`` from the published wheel): ``call_sandbox_api``
per request and ``check_correctness`` per generation (one call per test case, call-based
``fn_name`` wrapping done by verl itself)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import requests

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_sources import verl_sandbox_utils


@pytest.fixture(scope="module")
def verl() -> Any:
    return verl_sandbox_utils()


def url(svc: Service) -> str:
    return f"{svc.url}/run_code?token={TRAINER_A}"


def test_check_correctness_stdin_cases(compat_service: Service, verl: Any) -> None:
    code = "a, b = map(int, input().split())\nprint(a + b)"
    in_outs = {"inputs": ["1 2\n", "40 2\n", "5 5\n"], "outputs": ["3\n", "42\n", "11\n"]}
    results, meta = verl.check_correctness(url(compat_service), in_outs, code, timeout=10, language="python")
    assert results == [True, True, False]
    assert [m["status"] for m in meta] == ["success", "success", "wrong_answer"]


def test_check_correctness_call_based_fn_name(compat_service: Service, verl: Any) -> None:
    code = "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n" + (
        "        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n                return [seen[target - x], i]\n"
        "            seen[x] = i\n"
    )
    in_outs = {
        "inputs": ["[2, 7, 11, 15]\n9", "[3, 2, 4]\n6"],
        "outputs": ["[0, 1]", "[2, 1]"],
        "fn_name": "twoSum",
    }
    results, _ = verl.check_correctness(url(compat_service), in_outs, code, timeout=10, language="python")
    assert results == [True, False]


def test_check_correctness_error_kinds(compat_service: Service, verl: Any) -> None:
    one = {"inputs": ["1\n"], "outputs": ["1\n"]}
    assert verl.check_correctness(url(compat_service), one, "raise SystemExit(3)", timeout=5)[0] == [-2]
    assert verl.check_correctness(url(compat_service), one, "while True: pass", timeout=1)[0] == [-3]
    bad_cpp = "int main() { return y; }"
    assert verl.check_correctness(url(compat_service), one, bad_cpp, timeout=10, language="cpp")[0] == [-4]
    good_cpp = '#include <cstdio>\nint main(){int x; scanf("%d", &x); printf("%d\\n", x);}'
    assert verl.check_correctness(url(compat_service), one, good_cpp, timeout=10, language="cpp")[0] == [True]


def test_output_over_64_kib_comes_back_whole(compat_service: Service, verl: Any) -> None:
    """verl compares the whole stdout: 200 KB of output must not be cut (SandboxFusion keeps 1 MiB)."""
    n = 40_000
    in_outs = {"inputs": [str(n)], "outputs": ["\n".join(str(i) for i in range(n)) + "\n"]}
    code = "n = int(input())\nprint('\\n'.join(str(i) for i in range(n)))"
    results, meta = verl.check_correctness(url(compat_service), in_outs, code, timeout=10)
    assert results == [True], meta[0].get("status")


def test_output_past_1_mib_is_cut_and_says_so(compat_service: Service, verl: Any) -> None:
    resp, err = verl.call_sandbox_api(url(compat_service), "print('x' * 1_500_000)", None, 10, 10, 1024)
    assert err is None and resp is not None
    assert len(resp["run_result"]["stdout"]) == 1 << 20
    assert "stdout truncated" in resp["message"]  # never a silent Success


def test_memory_limit_mb_is_the_programs_limit(compat_service: Service, verl: Any) -> None:
    code = "x = bytearray(600 * 1024 * 1024)\nprint(len(x) >> 20)"
    resp, _ = verl.call_sandbox_api(url(compat_service), code, None, 10, 10, 256)
    assert resp["status"] == "Failed" and resp["run_result"]["return_code"] != 0
    assert "MemoryError" in resp["run_result"]["stderr"]
    resp, _ = verl.call_sandbox_api(url(compat_service), code, None, 10, 10, 2048)
    assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "600\n"


def test_files_in_and_fetch_files_out(compat_service: Service) -> None:
    code = "data = open('in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint(len(data))"
    body = {
        "code": code,
        "language": "python",
        "files": {"in.txt": base64.b64encode(b"hello files").decode(), "skipped.txt": None},
        "fetch_files": ["out.txt", "missing.txt"],
    }
    resp = requests.post(url(compat_service), json=body, timeout=60).json()
    assert resp["status"] == "Success" and resp["message"] == ""
    assert resp["run_result"]["stdout"] == "11\n"
    assert resp["files"] == {"out.txt": base64.b64encode(b"HELLO FILES").decode()}


def test_cpp_files_reach_the_compiler(compat_service: Service) -> None:
    header = b"inline int answer() { return 42; }\n"
    body = {
        "code": '#include <cstdio>\n#include "answer.h"\nint main(){ printf("%d\\n", answer()); }',
        "language": "cpp",
        "files": {"answer.h": base64.b64encode(header).decode()},
    }
    resp = requests.post(url(compat_service), json=body, timeout=60).json()
    assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "42\n"


def test_status_strings_match_sandbox_fusion(compat_service: Service, verl: Any) -> None:
    ok, _ = verl.call_sandbox_api(url(compat_service), "print(1)", None, 10, 10, 1024)
    assert (ok["status"], ok["message"], ok["run_result"]["status"]) == ("Success", "", "Finished")
    tle, _ = verl.call_sandbox_api(url(compat_service), "while True: pass", None, 10, 1, 1024)
    assert (tle["status"], tle["message"], tle["run_result"]["status"]) == ("Failed", "", "TimeLimitExceeded")
    assert tle["run_result"]["return_code"] is None
    bad, _ = verl.call_sandbox_api(url(compat_service), "int main(){return y;}", None, 10, 10, 1024, "cpp")
    assert (bad["status"], bad["message"], bad["run_result"]) == ("Failed", "", None)
    assert bad["compile_result"]["status"] == "Finished" and bad["compile_result"]["return_code"] != 0


def test_a_504_retry_waits_on_the_first_run(compat_service: Service, verl: Any) -> None:
    """verl retries a 504 with the same body; the retry reattaches to the run already going."""
    code = "import time\ntime.sleep(1.0)\nprint('once', flush=True)"
    body = {"code": code, "language": "python", "stdin": None, "compile_timeout": 10, "run_timeout": 10}
    body.update({"memory_limit_MB": 1024, "files": {}, "fetch_files": []})
    first = requests.post(url(compat_service), json=body, headers={"X-DistRS-Timeout": "0.2"}, timeout=30)
    assert first.status_code == 504
    resp, err = verl.call_sandbox_api(url(compat_service), code, None, 10, 10, 1024)
    assert err is None and resp["run_result"]["stdout"] == "once\n"
    from distrs.proxy.routes.compat import content_hash
    from distrs.proxy.routes.sandboxfusion import RunCodeRequest, run_code_payload

    batch = "rc-" + content_hash(["python", run_code_payload(RunCodeRequest.model_validate(body))])
    with compat_service.client() as c:
        page = c.get(f"/v1/batches/sandboxfusion/{batch}/results").json()
        assert page["done"] == 1
        assert c.get(f"/v1/requests/sandboxfusion/{batch}-0").json()["attempts"] == 1
