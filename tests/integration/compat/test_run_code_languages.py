"""``/run_code`` in every shipped language, called with verl 0.9.1's own ``call_sandbox_api``
(languages verl does not list are posted directly): hello world, stdin, a source that does not
compile and a time-out, with SandboxFusion's statuses. Skipped per language where its runtime is
not installed on this host."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from distrs.core.languages import find_language, language_table
from distrs.rewards.language_handler import JAIL_PATH, runtime_installed
from tests.fixtures.service import TRAINER_A, Service, running_service
from tests.integration.compat.framework_sources import verl_sandbox_utils
from tests.integration.sandbox.language_programs import PROGRAMS

# SandboxFusion's names where they differ from ours.
SF_NAME = {"kotlin": "kotlin_script", "D": "D", "typescript": "typescript"}
LANGS = sorted(n for n in PROGRAMS if n != "pytest")


@pytest.fixture(scope="module")
def verl() -> Any:
    return verl_sandbox_utils()


@pytest.fixture(scope="module")
def lang_service() -> Iterator[Service]:
    """JVM compilers (kotlinc, scalac) take longer than the shared fixture's 5 s lease."""
    with running_service(workers={"run": 1, "compile": 1}, env={"DISTRS_LEASE_TTL_S": "60"}) as svc:
        yield svc


def call(
    svc: Service, verl: Any, lang: str, code: str, stdin: str | None, run_timeout: float = 10
) -> dict[str, Any]:
    name = SF_NAME.get(lang, lang)
    url = f"{svc.url}/run_code?token={TRAINER_A}"
    if name in verl.SUPPORTED_LANGUAGES:
        resp, err = verl.call_sandbox_api(url, code, stdin, 60, run_timeout, 1024, name)
        assert err is None, err
        return dict(resp)
    body = {"code": code, "stdin": stdin, "language": name, "compile_timeout": 60, "run_timeout": run_timeout}
    return dict(requests.post(url, json=body, timeout=120).json())


@pytest.mark.parametrize("lang", LANGS)
def test_language_over_run_code(lang_service: Service, verl: Any, lang: str) -> None:
    found = find_language(lang)
    assert found is not None
    _, spec = found
    if not runtime_installed(spec, ""):
        pytest.skip(f"{lang}: runtime {spec.runtime!r} is not installed on this host (in {JAIL_PATH})")
    progs = PROGRAMS[lang]
    hello = call(lang_service, verl, lang, progs["hello"], None)
    assert hello["status"] == "Success", hello
    assert hello["run_result"]["stdout"].strip() == "hello"
    assert (hello["compile_result"] is not None) == (spec.compile is not None)
    doubled = call(lang_service, verl, lang, progs["stdin"], "21\n")
    assert doubled["status"] == "Success" and doubled["run_result"]["stdout"].strip() == "42", doubled
    broken = call(lang_service, verl, lang, progs["broken"], None)
    assert broken["status"] == "Failed"
    if spec.compile is not None:
        assert broken["run_result"] is None and broken["compile_result"]["return_code"] != 0
    else:
        assert broken["run_result"]["return_code"] != 0
    loop = call(lang_service, verl, lang, progs["loop"], None, run_timeout=1)
    assert loop["status"] == "Failed" and loop["run_result"]["status"] == "TimeLimitExceeded", loop


def test_unknown_language_lists_the_known_ones(compat_service: Service) -> None:
    r = requests.post(
        f"{compat_service.url}/run_code?token={TRAINER_A}", json={"code": "x", "language": "cobol"}
    )
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "language"
    msg = r.json()["error"]["message"]
    assert all(name in msg for name in language_table())


def test_one_run_code_per_test_case_compiles_once(lang_service: Service) -> None:
    """verl's sandbox client sends the same program once per test case: the (one) run worker
    compiles it for the first call and serves the others from its compile cache."""
    if not runtime_installed(language_table()["c"], ""):
        pytest.skip("c: gcc is not installed on this host")
    code = PROGRAMS["c"]["stdin"] + "\n/* compiled once */\n"
    batches = []
    for i, n in enumerate((21, 5, 8)):
        batch = f"cc-once-{i}"
        body = {"code": code, "stdin": f"{n}\n", "language": "c", "compile_timeout": 60, "run_timeout": 10}
        r = requests.post(
            f"{lang_service.url}/run_code?token={TRAINER_A}",
            json=body,
            headers={"X-DistRS-Batch": batch},
            timeout=120,
        )
        assert r.status_code == 200 and r.json()["status"] == "Success", r.text
        assert r.json()["run_result"]["stdout"].strip() == str(2 * n)
        batches.append(batch)
    with lang_service.client() as c:
        details = [c.get(f"/v1/requests/sandboxfusion/{b}-0").json()["result"]["detail"] for b in batches]
    assert [d.get("compile_cached", False) for d in details] == [False, True, True], details


# SandboxFusion's own TypeScript runner tests (sandbox/tests/runners/test_typescript.py), which it
# runs with tsx: no type checking, Node's globals and modules available, default imports interop.
TS_CASES = [
    (
        "stdin via process.stdin",
        "process.stdin.on('data', (input: Buffer) => {\n  const num: number = parseInt(input.toString());\n"
        "  console.log(num);\n  process.exit();\n});",
        "65535",
        ("Success", "65535\n", None),
    ),
    (
        "import assert default",
        "import assert from \"assert\";\nassert.strictEqual(1, 2, '1 !== 2');",
        None,
        ("Failed", "", "AssertionError"),
    ),
    ("humanevalx console.assert", "console.assert(1 === 2);", None, ("Success", "", "Assertion failed")),
    (
        "util.promisify default import",
        "import util from 'util';\nconst sleep = util.promisify(setTimeout);\n"
        "async function main() { await sleep(50); console.log('slept'); }\nmain();",
        None,
        ("Success", "slept\n", None),
    ),
    (
        "a type error still runs",
        "let y: number = 'b' as unknown as number;\nlet z: number = 'c';\nconsole.log(z);",
        None,
        ("Success", "c\n", None),
    ),
    (
        "require a Node module",
        "const os = require('os');\nconsole.log(typeof os.EOL);",
        None,
        ("Success", "string\n", None),
    ),
]


@pytest.mark.parametrize(("case", "code", "stdin", "want"), TS_CASES, ids=[c[0] for c in TS_CASES])
def test_typescript_runs_as_sandbox_fusion_runs_it(
    lang_service: Service,
    verl: Any,
    case: str,
    code: str,
    stdin: str | None,
    want: tuple[str, str, str | None],
) -> None:
    found = find_language("typescript")
    assert found is not None
    if not runtime_installed(found[1], ""):
        pytest.skip(
            "typescript: node-typescript is not installed on this host (scripts/system-deps.sh installs it)"
        )
    resp = call(lang_service, verl, "typescript", code, stdin)
    status, stdout, in_stderr = want
    assert resp["status"] == status, resp
    assert resp["run_result"]["status"] == "Finished" and resp["run_result"]["stdout"] == stdout
    if in_stderr is not None:
        assert in_stderr in resp["run_result"]["stderr"]
