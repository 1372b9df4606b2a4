"""The zygote of a worker in ``private`` mode (the chart's default ``seccompProfile`` pods).

Such a worker is an unprivileged uid that is root of a user namespace of its own with only that
uid mapped (``distrs worker`` re-enters itself through ``unshare --user --map-root-user
--mount``); each request forked from its zygote gets a further user namespace, as bubblewrap's
jail per request does. The whole of ``test_python_forkserver.py`` and ``test_plugins.py`` passes
when pytest itself runs as such a worker, with and without ``/proc``, none skipped: every
program's run through the zygote equals a jail per case (uid/gid, groups, capabilities,
``NoNewPrivs``, ``Seccomp``, mounts, environment, umask, interfaces, rlimits, fds), the hostile
fork-server programs fail, and nothing of one request (or plugin call) reaches the next.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SYSTEM_PYTHON = "/usr/bin/python3"
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--"]


def _site() -> str:
    return next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())


def _need_root_and_system_python() -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("switches to an unprivileged uid: needs root")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if version.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip("needs a system python of this version that an unprivileged uid can run")


def _scratch(request: pytest.FixtureRequest) -> Path:
    base = Path(tempfile.mkdtemp(prefix="distrs-zygote-private-"))  # pytest's tmp is root-only
    base.chmod(0o777)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    return base


def _run(cmd: list[str]) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": f"{ROOT}:{_site()}"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    if r.returncode != 0 and "Permission denied" in r.stderr:
        pytest.skip(f"the unprivileged uid cannot read this checkout: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def test_the_fork_server_and_plugin_tests_pass_in_a_private_worker(request: pytest.FixtureRequest) -> None:
    """Every test of ``test_python_forkserver.py`` and ``test_plugins.py`` (their hostile
    programs, both ways through the ``warm`` and ``sandbox`` fixtures) run by a private worker:
    the zygote variants run there too, none skipped. Not those that switch to another uid
    themselves (a user namespace with one uid mapped has no other)."""
    _need_root_and_system_python()
    base = _scratch(request)
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *UNSHARE, SYSTEM_PYTHON]
    cmd += ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--basetemp={base / 'pytest'}"]
    cmd += ["-k", "not non_root_workers", "tests/integration/sandbox/test_python_forkserver.py"]
    cmd += ["tests/integration/sandbox/test_plugins.py"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": f"{ROOT}:{_site()}"}
    env["DISTRS_SANDBOX_WORKDIR_BASE"] = str(base / "sbx")  # the handlers' own readiness check
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200, check=False)
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-2000:]
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "skipped" not in summary and "passed" in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 50, summary


COVERED = """
import sys
from distrs.sandbox import SandboxSettings
from distrs.sandbox.local import BWRAP, LocalSandbox
from distrs.sandbox.zygote import private_proc_covered
from distrs.rewards.interpreter import interpreter
from distrs.rewards.python_reward import forkserver_source
import json
exe, mounts = interpreter("")
out = {}
for proc in (True, False):
    sb = LocalSandbox(SandboxSettings(workdir_base=sys.argv[1], mount_proc=proc, cgroups=False), BWRAP)
    out[str(proc)] = [sb.mode, sb.zygote(exe, forkserver_source(), mounts) is not None]
    sb.close_zygotes()
out["covered"] = private_proc_covered()
print(json.dumps(out))
"""


def test_a_root_that_mapped_only_itself_keeps_a_jail_per_request_where_jails_mount_proc(
    request: pytest.FixtureRequest,
) -> None:
    """Real root in a user namespace of its own may write to parts of /proc, which bubblewrap
    then covers read-only in the zygote's jail; the kernel refuses a request's fresh /proc under
    those locked covers (mount: EPERM), so with /proc such a worker starts a jail per request."""
    _need_root_and_system_python()
    base = _scratch(request)
    got = _run([*UNSHARE, sys.executable, "-c", COVERED, str(base / "sbx")])
    assert got == {"True": ["private", False], "False": ["private", True], "covered": True}


CGROUPS = """
import json, sys
from distrs.rewards.base import StageInput
from distrs.rewards.judge.settings import JudgeSettings
from distrs.rewards.python_reward import PythonRunHandler
from distrs.sandbox import SandboxSettings
from distrs.sandbox.cgroups import RunCgroup
from distrs.sandbox.local import BWRAP, LocalSandbox
joined = []
join = RunCgroup.join
RunCgroup.join = lambda self, pid: (joined.append(self.memory.name), join(self, pid))[1]
sb = LocalSandbox(SandboxSettings(workdir_base=sys.argv[1], mount_proc=False), BWRAP)
out = {"mode": sb.mode, "cgroups": sb.cgroups is not None}
if sb.cgroups is not None:
    runs = lambda: sorted(p.name for p in sb.cgroups.memory.glob("distrs-run-*"))
    before, h = runs(), PythonRunHandler(sb, JudgeSettings(test_time_s=3.0))
    verdicts = []
    for code, want in (("import sys\\nprint('socket' in sys.modules)", "True"), ("x = [0] * (1 << 28)", "x")):
        payload = {"code": code, "tests": [{"stdin": "", "expected_stdout": want}], "memory_limit_mb": 256}
        r = h.run(StageInput("r", "t", "python", "run", payload, timeout_s=30))
        verdicts.append([r.status.value, r.detail.get("oom_killed", r.detail.get("tests", [{}])[0].get("reason"))])
    sb.close_zygotes()
    out.update(verdicts=verdicts, joined=joined, left=sorted(set(runs()) - set(before)))
print(json.dumps(out))
"""


def test_a_private_workers_requests_each_get_a_cgroup_of_their_own_removed_after_them(
    request: pytest.FixtureRequest,
) -> None:
    """Without a pool uid a request's server joins a one-off cgroup (memory and pids), which goes
    when the server is killed. Real root that mapped only itself may create cgroups here (a
    non-root worker seldom can), so this runs as that root, without /proc (see above)."""
    _need_root_and_system_python()
    base = _scratch(request)
    got = _run([*UNSHARE, sys.executable, "-c", CGROUPS, str(base / "sbx")])
    assert got["mode"] == "private"
    if not got["cgroups"]:
        pytest.skip("this host lets a user namespace's root create no cgroup")
    assert got["verdicts"][0][0] == "ok"  # forked from the zygote (it has the zygote's imports)
    assert got["verdicts"][1][0] == "memory_limit_exceeded", got["verdicts"]
    joined = got["joined"]  # each request's server, into a cgroup of its own
    assert len(joined) == 2 and len(set(joined)) == 2 and all(n.startswith("distrs-run-") for n in joined)
    assert got["left"] == []
