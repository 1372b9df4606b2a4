"""The zygote checks of ``test_python_forkserver.py``, run by a worker in ``private`` mode.

``test_zygote_private.py`` starts this module as an unprivileged uid that re-entered itself
through ``unshare --user --map-root-user --mount`` (as ``distrs worker`` does in a non-root pod):
the sandbox is then root of a user namespace with one mapped uid, and every request forked from
the zygote gets a user namespace of its own. It prints one JSON object of findings, which the
test asserts on. Usage: ``python -m tests.integration.sandbox.private_zygote_checks BASE PROC``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from distrs.core.model import Status
from distrs.rewards.interpreter import interpreter
from distrs.rewards.python_reward import PythonRunHandler, forkserver_source
from distrs.sandbox import Limits, SandboxError, SandboxSettings
from distrs.sandbox.forkserver import ForkServerSession, server_limits
from distrs.sandbox.local import BWRAP, LocalSandbox
from tests.integration.sandbox import test_python_forkserver as fs


def _compare_runs(sb: LocalSandbox, programs: dict[str, str]) -> dict[str, Any]:
    """Every program of ``programs`` as a jail per case and through a server forked from the
    zygote: the names of those whose exit, signal, stdout or stderr differ."""
    exe, mounts = interpreter("")
    argv = [exe, "-I", "-B", "main.py"]
    limits = Limits(wall_s=5, memory_bytes=512 << 20)
    zygote = sb.zygote(exe, forkserver_source(), mounts)
    assert zygote is not None
    differ: dict[str, Any] = {}
    seen: dict[str, str] = {}
    with sb.session() as s:
        runner = ForkServerSession(
            s,
            program=argv,
            server=[exe, "-I", "-B", "-c", forkserver_source(), "main.py"],
            isolation=sb.isolation,
            mounts=mounts,
            start=lambda lim: s.start_forked(zygote, ["main.py"], limits=server_limits(lim)),
        )
        try:
            for name, code in programs.items():
                s.write_file("main.py", code.encode())
                a = s.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                b = runner.run(argv, limits=limits, stdin=b"1 2\n", mounts=mounts)
                got = [
                    (r.termination.value, r.exit_code, r.signal, r.stdout.decode(), r.stderr.decode())
                    for r in (a, b)
                ]
                if got[0] != got[1]:
                    differ[name] = got
                seen[name] = b.stdout.decode()
        finally:
            runner.close()
        return {"differ": differ, "seen": seen, "servers": runner.servers_started, "zygotes": zygote.started}


def _hostile_server(sb: LocalSandbox, by: str, limits: Limits) -> dict[str, Any]:
    """One run through a server, forked from a zygote of a hostile server source."""
    runner, argv, mounts = None, [], None
    with sb.session() as s:
        s.write_file("main.py", b"print(42)\n")
        runner, argv, mounts = fs._hostile_runner(s, sb, by, forked=True)
        try:
            try:
                first = runner.run(argv, limits=limits, stdin=b"", mounts=mounts)
            except SandboxError as e:
                return {"sandbox_error": str(e)}
            second = runner.run(argv, limits=limits, stdin=b"", mounts=mounts)
            return {
                "first": [
                    first.ok,
                    first.exit_code,
                    first.timed_out,
                    first.stdout.decode(),
                    first.stderr.decode(),
                ],
                "second_stdout": second.stdout.decode(),
                "servers": runner.servers_started,
            }
        finally:
            runner.close()


def main(base: str, proc: bool) -> dict[str, Any]:
    sb = LocalSandbox(SandboxSettings(workdir_base=base, mount_proc=proc, cgroups=False), BWRAP)
    out: dict[str, Any] = {"mode": sb.mode}
    try:
        out["runs"] = _compare_runs(sb, fs.PROGRAMS)
        h = PythonRunHandler(sb, fs.SETTINGS)
        poison = [{"stdin": "poison", "expected_stdout": "42"}, {"stdin": "clean", "expected_stdout": "42"}]
        r = fs.judge(h, fs.POISON, poison)
        out["poison"] = [
            [t["status"] for t in r.detail["tests"]],
            fs.judge(h, fs.POISON, poison[1:]).status.value,
        ]
        daemon = [{"stdin": "start", "expected_stdout": "42"}, {"stdin": "check", "expected_stdout": "42"}]
        out["daemon"] = [t["status"] for t in fs.judge(h, fs.DAEMON, daemon).detail["tests"]]
        safe = [{"stdin": "", "expected_stdout": "safe"}]
        out["forge"] = [
            fs.judge(h, fs.FORGE, safe).status.value,
            fs.judge(h, fs.FORGE, safe, mode="raw").detail["run"]["stdout"],
        ]
        kill = (
            "import os, signal\nif input().strip() == 'attack':\n"
            + "".join(
                f"    try:\n        os.kill({pid}, signal.{sig})\n    except OSError:\n        pass\n"
                for sig in ("SIGSTOP", "SIGKILL", "SIGTERM", "SIGINT")
                for pid in ("os.getppid()", "1", "-1")
            )
            + "print(42)\n"
        )
        attack = [{"stdin": "attack", "expected_stdout": "42"}, {"stdin": "ok", "expected_stdout": "42"}]
        out["kill_server"] = [t["status"] for t in fs.judge(h, kill, attack).detail["tests"]]
        plant, check = (
            {"stdin": "plant", "expected_stdout": "42"},
            {"stdin": "check", "expected_stdout": "42"},
        )
        out["leak_same_request"] = fs.judge(h, fs.LEAK, [plant, check], mode="raw").detail["tests"][1][
            "stdout"
        ]
        out["leak_plant"] = fs.judge(h, fs.LEAK, [plant]).status.value
        out["leak_next_request"] = fs.judge(h, fs.LEAK, [check], mode="raw").detail["run"]["stdout"]
        ident = "import os\nprint(os.getuid(), os.getgid(), os.getppid())"
        out["identity"] = fs.judge(h, ident, safe, mode="raw").detail["run"]["stdout"]
        out["malformed"] = [_hostile_server(sb, forged, Limits(wall_s=3)) for forged in fs.FORGED_REPORTS]
        out["server_dies"] = _hostile_server(sb, "        os._exit(0)\n", Limits(wall_s=3))
        out["server_stalls"] = _hostile_server(sb, "        time.sleep(3600)\n", Limits(wall_s=0.5))
        exe, mounts = interpreter("")
        zygote = sb.zygote(exe, forkserver_source(), mounts)
        out["zygote_started"] = zygote.started if zygote is not None else None
        out["statuses_ok"] = Status.OK.value
    finally:
        sb.close_zygotes()
    try:
        fs.assert_no_survivors()
        out["survivors"] = []
    except AssertionError as e:
        out["survivors"] = str(e)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2] == "1")))
