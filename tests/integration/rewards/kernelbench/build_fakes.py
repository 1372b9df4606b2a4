"""A stand-in sandbox for the compile stage's time tests: its "jails" are plain processes that
speak the compile stage's protocols (the candidate's import asks for one build; a builder takes
``build_s`` seconds), and every build's start and end is logged, so a test can count the builds
in flight. It serves a build as a helper (``Session.start``) or as one run (``Session.run``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distrs.sandbox import Limits, RunResult, Termination

# argv: kind log build_s reply. The import (ready first, where it is started before its
# candidate is written) waits for candidate.py and asks for one build of its text; a builder
# says it is ready, logs, works build_s seconds and replies (ok, or its CPU limit used).
CHILD = r"""
import json, os, sys, time
kind, log, build_s, reply = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def send(o):
    sys.stdout.write(json.dumps(o) + "\n"); sys.stdout.flush()
if kind == "import":
    if not os.path.exists("candidate.py"):  # started ahead of its request: says it is ready
        send({"ready": True})
    while not os.path.exists("candidate.py"):
        time.sleep(0.01)
    send({"build": {"name": "m", "cpp_sources": open("candidate.py").read(), "functions": ["f"]}})
    for line in sys.stdin:
        msg = json.loads(line)
        if "go" not in msg:
            send({"done": True, "ok": bool(msg.get("ok")), "kind": "build", "message": msg.get("message", "")})
            break
else:
    send({"ready": True})
    sys.stdin.readline()
    with open(log, "a") as f:
        f.write(f"S {time.monotonic()}\n")
    time.sleep(build_s)
    with open(log, "a") as f:
        f.write(f"E {time.monotonic()}\n")
    open("out.so", "wb").write(b"\x7fELF")
    send(json.loads(reply))
"""


class FakeHelper:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def oom_kills(self) -> int:
        return 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class FakeSession:
    def __init__(self, box: FakeSandbox, path: Path) -> None:
        self.box = box
        self.path = path

    def write_file(self, name: str, data: bytes, *, executable: bool = False) -> Path:
        (self.path / name).write_bytes(data)
        return self.path / name

    def read_file(self, name: str, max_bytes: int) -> bytes | None:
        p = self.path / name
        return p.read_bytes() if p.is_file() else None

    def start(self, argv: Sequence[str], *, limits: Limits, **kw: Any) -> FakeHelper:
        kind = "build" if "build_call.py" in argv else "import"
        args = [kind, str(self.box.log), str(self.box.build_s), json.dumps(self.box.reply)]
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args], cwd=self.path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return FakeHelper(proc)

    def run(self, argv: Sequence[str], *, limits: Limits, stdin: bytes = b"", **kw: Any) -> RunResult:
        """A build as one run (what a build was before it became a helper)."""
        self.box.mark("S")
        took = min(self.box.build_s, limits.wall_s)
        time.sleep(took)
        self.box.mark("E")
        if self.box.build_s > limits.wall_s:
            return RunResult(Termination.TIMEOUT, None, signal.SIGKILL, b"", b"", took, 0.0)
        if self.box.reply.get("cpu_exceeded"):
            return RunResult(Termination.SIGNALED, None, signal.SIGXCPU, b"", b"", took, took)
        (self.path / "out.so").write_bytes(b"\x7fELF")
        out = json.dumps({"ok": True, "module": "m"}).encode()
        return RunResult(Termination.EXITED, 0, None, out, b"", took, took)


class FakeSandbox:
    isolation = "bwrap"

    def __init__(self, root: Path, build_s: float, reply: dict[str, Any] | None = None) -> None:
        self.root = root
        self.log = root / "builds.log"
        self.build_s = build_s
        self.reply = reply or {"ok": True, "module": "m", "cpu_s": 1.0}
        self._lock = threading.Lock()

    def mark(self, what: str) -> None:
        with self._lock, open(self.log, "a") as f:
            f.write(f"{what} {time.monotonic()}\n")

    @contextmanager
    def session(self, **kw: Any) -> Iterator[FakeSession]:
        with tempfile.TemporaryDirectory(dir=self.root) as d:
            yield FakeSession(self, Path(d))

    def most_in_flight(self) -> tuple[int, int]:
        """(builds started, the most running at once), from the log."""
        events = sorted(
            (float(t), kind) for kind, t in (line.split() for line in self.log.read_text().splitlines())
        )
        running = most = started = 0
        for _, kind in events:
            running += 1 if kind == "S" else -1
            started += kind == "S"
            most = max(most, running)
        return started, most
