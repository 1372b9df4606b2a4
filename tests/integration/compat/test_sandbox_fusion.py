"""SandboxFusion ``POST /run_code`` spoken as verl's sandbox integration speaks it."""

from __future__ import annotations

import pytest
import requests

from tests.fixtures.service import TRAINER_A, TRAINER_B, WORKER, Service
from tests.integration.compat.framework_clients import verl_call_sandbox_api


def url(svc: Service, token: str = TRAINER_A) -> str:
    return f"{svc.url}/run_code?token={token}"  # verl sends no headers: the token rides in the URL


def test_python_program_output_comes_back_verbatim(compat_service: Service) -> None:
    code = "import sys\nprint(sys.stdin.read().upper(), end='')\nprint('  two spaces  ')"
    resp, err, attempts = verl_call_sandbox_api(url(compat_service), code, "hello\n", 10, 5, 512)
    assert err is None and attempts == 1 and resp is not None
    assert resp["status"] == "Success" and resp["compile_result"] is None
    run = resp["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0
    assert run["stdout"] == "HELLO\n  two spaces  \n"
    assert isinstance(run["execution_time"], float)


def test_python_runtime_error_reports_exit_code_and_traceback(compat_service: Service) -> None:
    resp, _, _ = verl_call_sandbox_api(
        url(compat_service), "import sys\nraise KeyError('k')", None, 10, 5, 512
    )
    assert resp is not None and resp["status"] == "Failed"
    run = resp["run_result"]
    assert run["status"] == "Finished" and run["return_code"] not in (0, None)
    assert "KeyError" in run["stderr"]
    resp, _, _ = verl_call_sandbox_api(url(compat_service), "import sys\nsys.exit(3)", None, 10, 5, 512)
    assert resp is not None and resp["run_result"]["return_code"] == 3


def test_time_limit_exceeded(compat_service: Service) -> None:
    resp, _, _ = verl_call_sandbox_api(url(compat_service), "while True: pass", "", 10, 0.5, 512)
    assert resp is not None and resp["status"] == "Failed"
    assert resp["run_result"]["status"] == "TimeLimitExceeded"


def test_cpp_compiles_and_runs(compat_service: Service) -> None:
    code = '#include <cstdio>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}'
    resp, _, _ = verl_call_sandbox_api(url(compat_service), code, "40 2", 10, 5, 512, language="cpp")
    assert resp is not None and resp["status"] == "Success"
    assert resp["compile_result"]["status"] == "Finished" and resp["compile_result"]["return_code"] == 0
    assert resp["run_result"]["stdout"] == "42\n"


def test_cpp_compile_error(compat_service: Service) -> None:
    resp, _, _ = verl_call_sandbox_api(
        url(compat_service), "int main(){ return y; }", "", 10, 5, 512, language="cpp"
    )
    assert resp is not None and resp["status"] == "Failed" and resp["run_result"] is None
    comp = resp["compile_result"]
    assert comp["status"] == "Finished" and comp["return_code"] != 0 and "y" in comp["stderr"]


def test_unsupported_language_and_bad_fields_are_422_naming_the_field(compat_service: Service) -> None:
    r = requests.post(url(compat_service), json={"code": "x", "language": "cobol"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "language"
    r = requests.post(url(compat_service), json={"language": "python"})
    assert r.status_code == 422 and "code" in r.json()["error"]["message"]
    r = requests.post(url(compat_service), json={"code": "x", "files": {"../a.txt": "aGk="}})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "files"
    r = requests.post(url(compat_service), json={"code": "x", "files": {"a.txt": "not base64!"}})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "files"
    r = requests.post(url(compat_service), json={"code": "x", "fetch_files": ["../etc/passwd"]})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "fetch_files"


def test_auth_by_header_or_query_and_roles(compat_service: Service) -> None:
    body = {"code": "print(1)", "language": "python"}
    assert requests.post(f"{compat_service.url}/run_code", json=body).status_code == 401
    assert requests.post(url(compat_service, "bogus"), json=body).status_code == 401
    assert requests.post(url(compat_service, WORKER), json=body).status_code == 403
    r = requests.post(
        f"{compat_service.url}/run_code", json=body, headers={"Authorization": f"Bearer {TRAINER_B}"}
    )
    assert r.status_code == 200 and r.json()["run_result"]["stdout"] == "1\n"


def test_504_is_retried_by_verl_and_a_batch_header_keeps_retries_idempotent(compat_service: Service) -> None:
    """A wait that runs out answers 504, which verl retries; with ``X-DistRS-Batch`` the retry
    picks up the first attempt's run instead of running the program again."""
    code = "import time\ntime.sleep(0.6)\nprint('once')"
    headers = {"X-DistRS-Batch": "verl-retry-1", "X-DistRS-Timeout": "0.3", "X-DistRS-Task": "compat-retry"}
    resp, err, attempts = verl_call_sandbox_api(
        url(compat_service), code, "", 10, 5, 512, max_retries=6, initial_delay_s=0.2, headers=headers
    )
    assert err is None and resp is not None and attempts > 1
    assert resp["run_result"]["stdout"] == "once\n"
    with compat_service.client() as c:
        rec = c.get("/v1/requests/compat-retry/verl-retry-1-0").json()
        assert rec["attempts"] == 1  # ran once across every retried HTTP call
        assert c.get("/v1/batches/compat-retry/verl-retry-1/results").json()["done"] == 1


@pytest.mark.parametrize("bad", ["has space", ""])
def test_bad_batch_header(compat_service: Service, bad: str) -> None:
    r = requests.post(
        url(compat_service), json={"code": "print(1)", "language": "python"}, headers={"X-DistRS-Batch": bad}
    )
    if bad:
        assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "X-DistRS-Batch"
    else:
        assert r.status_code == 200  # empty header = not given


def test_a_language_verl_knows_but_we_do_not_serve_is_an_error_verl_does_not_retry(
    compat_service: Service,
) -> None:
    resp, err, attempts = verl_call_sandbox_api(
        url(compat_service), "module m; endmodule", "", 10, 5, 512, language="verilog"
    )
    assert resp is None and attempts == 1 and err is not None and "422" in err


@pytest.mark.parametrize(
    ("field", "entry"),
    [
        ("files", "../escape.txt"),
        ("files", "dir/../../escape.txt"),
        ("files", "/etc/cron.d/x"),
        ("files", "a//b"),
        ("fetch_files", "../../etc/passwd"),
        ("fetch_files", "/jail/work/../../etc/passwd"),
    ],
)
def test_paths_that_leave_the_work_dir_are_422_naming_the_entry(
    compat_service: Service, field: str, entry: str
) -> None:
    body: dict[str, object] = {"code": "print(1)", "language": "python"}
    body[field] = {entry: "aGk="} if field == "files" else [entry]
    r = requests.post(url(compat_service), json=body, timeout=30)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["details"]["field"] == field and err["details"]["entry"] == entry
    assert entry in err["message"]


def test_a_file_that_is_also_a_directory_is_422(compat_service: Service) -> None:
    body = {"code": "print(1)", "files": {"a": "aGk=", "a/b": "aGk="}}
    r = requests.post(url(compat_service), json=body, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "files"


def test_fetch_files_never_follow_a_symlink_out_of_the_jail(compat_service: Service) -> None:
    """A program that plants symlinks to host files gets nothing back through them."""
    code = (
        "import os\nos.symlink('/etc/passwd', 'leak')\nos.symlink('/etc', 'etcdir')\n"
        "os.makedirs('real')\nopen('real/ok.txt', 'w').write('ok')"
    )
    body = {"code": code, "fetch_files": ["leak", "etcdir/passwd", "real/ok.txt"]}
    resp = requests.post(url(compat_service), json=body, timeout=60).json()
    assert resp["status"] == "Success", resp
    assert resp["files"] == {"real/ok.txt": "b2s="}


def test_run_code_accepts_a_large_stdin_and_files_but_has_a_documented_limit(compat_service: Service) -> None:
    big = "1 " * (3 << 19)  # 3 MiB of stdin: past the 1 MiB limit of /v1 payloads
    body = {"code": "import sys\nprint(len(sys.stdin.read().split()))", "stdin": big}
    resp = requests.post(url(compat_service), json=body, timeout=60).json()
    assert resp["status"] == "Success" and resp["run_result"]["stdout"] == f"{3 << 19}\n"
    huge = {"code": "print(1)", "stdin": "x" * (17 << 20)}
    r = requests.post(url(compat_service), json=huge, timeout=60)
    assert r.status_code == 413 and "16777216" in r.json()["error"]["message"]


def test_cut_time_limits_are_said_in_message_for_compiled_languages_too(compat_service: Service) -> None:
    """The compile stage's cut travels with the binary to the run stage's result."""
    code = '#include <cstdio>\nint main(){puts("ok");}'
    body = {"code": code, "language": "cpp", "compile_timeout": 100, "run_timeout": 100}
    for _ in range(2):  # the second call is served from the compile cache: still reported
        resp = requests.post(url(compat_service), json=body, timeout=120).json()
        assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "ok\n"
        assert "compile_timeout 100 s was cut to 60 s by DISTRS_JUDGE_COMPILE_TIME_S" in resp["message"]
        assert "run_timeout 100 s was cut to 56.75 s by stages.run.timeout_s" in resp["message"]
        body["stdin"] = "x"  # a new request (not the first call's batch), same program
