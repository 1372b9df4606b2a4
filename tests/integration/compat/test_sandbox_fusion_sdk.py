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
