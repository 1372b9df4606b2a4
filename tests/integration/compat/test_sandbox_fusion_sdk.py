"""``POST /run_code`` driven by SandboxFusion's own client SDK (``pip install sandbox-fusion``).

The SDK appends ``/run_code`` to a base endpoint and sends no credentials, so it talks to an
``--insecure`` service here. Its ``summary_run_code_result`` is the SDK's own reading of a response;
getting the expected summary for each outcome shows the fields are where the SDK looks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.service import Service, running_service

sf = pytest.importorskip("sandbox_fusion")


@pytest.fixture(scope="module")
def insecure_service() -> Iterator[Service]:
    with running_service(workers={"run": 1, "compile": 1}, env={"DISTRS_INSECURE": "true"}) as svc:
        yield svc


def summary(resp: object) -> str:
    mapping = sf.SummaryMapping(
        Success="ok",
        Failed="failed",
        CompileFailed="compile_failed",
        RunFailed="run_failed",
        RunTimeout="tle",
    )
    return str(sf.summary_run_code_result(resp, mapping))


@pytest.mark.parametrize(
    ("language", "code", "stdin", "expected", "stdout"),
    [
        ("python", "print(int(input()) + 1)", "41", "ok", "42\n"),
        ("python", "import sys; sys.exit(2)", "", "run_failed", ""),
        ("python", "while True: pass", "", "tle", None),
        ("cpp", '#include <cstdio>\nint main(){puts("hi");}', "", "ok", "hi\n"),
        ("cpp", "int main(){ return q; }", "", "compile_failed", None),
    ],
)
def test_sdk_run_code(
    insecure_service: Service, language: str, code: str, stdin: str, expected: str, stdout: str | None
) -> None:
    req = sf.RunCodeRequest(code=code, language=language, stdin=stdin, run_timeout=1)
    resp = sf.run_code(req, endpoint=insecure_service.url, max_attempts=1, client_timeout=60)
    assert summary(resp) == expected
    if stdout is not None:
        assert resp.run_result.stdout == stdout


# SandboxFusion's own runner tests (sandbox/tests/runners/test_python.py, test_bash.py): a file
# given at a nested relative path, files fetched by relative and absolute path, a 1 MiB stdin.
NESTED = {"dir1/dir2/dir3/secret_flag": "ImhlbGxvLCB0aGlzIGlzIGEgdGVzdCI="}  # "hello, this is a test"


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'print(open("dir1/dir2/dir3/secret_flag").read())'),
        ("bash", "cat dir1/dir2/dir3/secret_flag"),
    ],
)
def test_sdk_nested_files_are_written_inside_the_work_dir(
    insecure_service: Service, language: str, code: str
) -> None:
    req = sf.RunCodeRequest(code=code, language=language, run_timeout=5, files=NESTED)
    resp = sf.run_code(req, endpoint=insecure_service.url, max_attempts=1, client_timeout=60)
    assert summary(resp) == "ok", resp
    assert "hello, this is a test" in resp.run_result.stdout


def test_sdk_fetch_files_relative_and_absolute(insecure_service: Service) -> None:
    import base64

    code = (
        'import os\nopen("a.txt", "w").write("secret")\nos.makedirs("out/deep")\n'
        'open("out/deep/c.txt", "w").write("nested")\nopen("/tmp/b", "w").write("sauce")\n'
        'open(os.getcwd() + "/d.txt", "w").write("cwd")'
    )
    cwd_file = "/jail/work/d.txt"
    req = sf.RunCodeRequest(
        code=code,
        language="python",
        run_timeout=5,
        fetch_files=["a.txt", "out/deep/c.txt", "/tmp/b", cwd_file, "/etc/hostname", "missing"],
    )
    resp = sf.run_code(req, endpoint=insecure_service.url, max_attempts=1, client_timeout=60)
    assert summary(resp) == "ok", resp
    got = {k: base64.b64decode(v).decode() for k, v in resp.files.items()}
    assert got["a.txt"] == "secret" and got["out/deep/c.txt"] == "nested"
    # absolute paths as the program saw them; a host file is never read (/etc/hostname is the
    # jail's read-only root, not something the program wrote), missing files are left out
    assert "/etc/hostname" not in got and "missing" not in got
    assert got["/tmp/b"] == "sauce"  # the session's own /tmp (its tmpfs), never the host's
    assert got.get(cwd_file) == "cwd"


def test_sdk_one_mib_stdin_is_accepted(insecure_service: Service) -> None:
    data = "x" * (1 << 20)
    req = sf.RunCodeRequest(
        code="import sys\nprint(len(sys.stdin.read()))", language="python", run_timeout=10, stdin=data
    )
    resp = sf.run_code(req, endpoint=insecure_service.url, max_attempts=1, client_timeout=60)
    assert summary(resp) == "ok", resp
    assert resp.run_result.stdout == f"{1 << 20}\n"
