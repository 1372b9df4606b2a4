"""Runs inside a clean build jail: one ``load_inline`` call, and nothing of the candidate.

Run as ``python -I -B build_call.py``. It imports torch's extension builder first, which is
most of its start, says ``{"ready": true}`` and only then reads its job, one JSON line on stdin,
so the worker can start it ahead of the request (``warm.py``)::

    {"args": ARGS, "pch": DIR | null, "cpu_s": LIMIT, "jobs": N, "split": true | false}

No candidate code runs in this process: the module it builds is a pure function of the call's
arguments (``ARGS``, canonical) and the toolchain, so the host may cache it by the call's key and
ship it to any request that makes the same call (``compile.py``). The built module is copied to
``out.so``; the reply is one JSON line on stdout: ``{"ok": true, "module": NAME, "cpu_s": S}``
or ``{"ok": false, "message": ..., "cpu_s": S, "cpu_exceeded": bool}``.

* ``jobs``: compiler jobs (ninja's ``MAX_JOBS``): the CPUs the host admitted the build with.
* ``cpu_s``: the CPU time all its compilers may use together. A watchdog adds up the CPU time of
  every process below this one (finished ones from the kernel's account of its children, live
  ones from ``/proc``) and stops the build where it passes the limit: the candidate's code took
  that much compiling, whatever the machine's load (wall time under contention is not).
* ``pch``: a directory holding ``torch/extension.h`` and its ``.gch`` (``pch.py``), put first
  on the include path: g++ then loads the precompiled header for the ``#include
  <torch/extension.h>`` that opens the generated ``main.cpp`` instead of parsing torch's headers
  again, provided it was made with the same flags; otherwise g++ ignores it and parses as usual,
  so the module is the same either way.
* ``split``: ninja runs ``nvcc_steps.py`` in nvcc's place (torch's ``PYTORCH_NVCC``): nvcc's own
  steps, with its device and host chains at once (see there).

``python -I -B build_call.py --pch`` with the extra C++ flags (JSON list) on stdin precompiles
``torch/extension.h`` with the flags torch uses for ``main.cpp`` into ``extension.h.gch`` (beside
a copy of the header, ``extension.h``) in the work dir. Standard library and torch only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time

ORIG_STDOUT = os.dup(1)
WATCH_S = 0.25
BEHIND_NICE = 5  # the bindings' compile, beside nvcc's front ends (see build())
CPU_SIGNALS = ("signal 24", "CPU time limit exceeded", "SIGXCPU")


def reply(obj: dict[str, object], *, lead: str = "") -> None:
    """One JSON line on the protocol's stdout (``lead``: a newline where other output may precede it)."""
    data = (lead + json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(ORIG_STDOUT, data) :]


def pch_flags(extra_cflags: list[str]) -> list[str]:
    """The flags torch's generated build gives ``main.cpp`` (less the module's own name)."""
    import torch.utils.cpp_extension as ce

    include = [f"-isystem{p}" for p in ce.include_paths()] + [f"-isystem{sysconfig.get_path('include')}"]
    return ["-DTORCH_API_INCLUDE_EXTENSION_H", *include, "-fPIC", "-std=c++20", *extra_cflags]


def precompile(extra_cflags: list[str]) -> dict[str, object]:
    import torch.utils.cpp_extension as ce

    header = os.path.join(ce.include_paths()[0], "torch", "extension.h")
    shutil.copyfile(header, "extension.h")
    cxx = os.environ.get("CXX", "c++")
    cmd = [cxx, "-x", "c++-header", "extension.h", "-o", "extension.h.gch", *pch_flags(extra_cflags)]
    # stdin: none (g++ reads a file named "" as its stdin, which here is the host's request, at EOF)
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        return {"ok": False, "message": (r.stderr or r.stdout)[-4000:]}
    return {"ok": True}


def _descendants_cpu(me: int) -> tuple[float, list[int]]:
    """CPU seconds of the live processes below ``me`` (each with its reaped children's) and their pids."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    spent: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(name)
        parent[pid] = int(rest[1])
        spent[pid] = sum(int(x) for x in rest[11:15]) / tick  # utime stime cutime cstime
    below, todo = [], [me]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        below += kids
        todo += kids
    return sum(spent[p] for p in below), below


class Watchdog:
    """Stops the build where its compilers' CPU time passes ``limit_s``; and where ``behind``
    names a source, lowers the priority of the compiles of that source (see :func:`build`)."""

    def __init__(self, limit_s: float, behind: str | None = None) -> None:
        self.limit_s = limit_s
        self.exceeded = False
        self._behind = behind
        self._lowered: set[int] = set()
        self._stop = threading.Event()
        self._proc = os.path.isdir("/proc/self")
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def used(self) -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        live = _descendants_cpu(os.getpid())[0] if self._proc else 0.0
        return ru.ru_utime + ru.ru_stime + live

    def _lower(self) -> None:
        assert self._behind is not None
        for pid in _descendants_cpu(os.getpid())[1]:
            if pid in self._lowered:
                continue
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                if (
                    self._behind.encode() in f.read()
                ):  # read each time: a fork shows its parent's until it execs
                    os.setpriority(os.PRIO_PROCESS, pid, BEHIND_NICE)
                    self._lowered.add(pid)

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            if self._proc and self._behind is not None:
                self._lower()
            if self.used() < self.limit_s:
                continue
            self.exceeded = True
            for pid in _descendants_cpu(os.getpid())[1] if self._proc else []:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            return

    def stop(self) -> None:
        self._stop.set()


def nvcc_in_steps(jobs: int) -> None:
    """ninja's nvcc becomes ``nvcc_steps.py`` (torch reads ``PYTORCH_NVCC`` when it writes the
    build), which runs the nvcc torch would have run: ``PYTORCH_NVCC`` where the jail names one,
    else CUDA_HOME's."""
    import torch.utils.cpp_extension as ce

    if ce.CUDA_HOME is None or not os.path.exists("nvcc_steps.py"):
        return
    wrapper = os.path.abspath("nvcc")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec '{sys.executable}' -I -B '{os.path.abspath('nvcc_steps.py')}' \"$@\"\n")
    os.chmod(wrapper, 0o755)
    real = os.environ.get("PYTORCH_NVCC") or os.path.join(ce.CUDA_HOME, "bin", "nvcc")
    os.environ["PYTORCH_NVCC"] = wrapper
    os.environ["DISTRS_KB_NVCC"] = real
    os.environ["DISTRS_KB_NVCC_JOBS"] = str(jobs)
    os.environ["DISTRS_KB_NVCC_LOG"] = os.path.abspath("nvcc_steps.log")


def timeline(started: float) -> dict[str, object]:
    """Where the build's time went: ninja's jobs and nvcc's steps, in seconds from ``started``
    (monotonic; ninja's log counts milliseconds from its own start, which is close to it)."""
    jobs = []
    with contextlib.suppress(OSError, ValueError):
        for line in pathlib.Path("build", ".ninja_log").read_text().splitlines()[1:]:
            start, end, _, target, _ = line.split("\t")
            jobs.append({"job": target, "start": int(start) / 1000, "end": int(end) / 1000})
    steps = []
    with contextlib.suppress(OSError, ValueError):
        for line in pathlib.Path("nvcc_steps.log").read_text().splitlines():
            s = json.loads(line)
            steps.append(
                {
                    "step": s["step"],
                    "start": s["start"] - started,
                    "end": s["end"] - started,
                    "cpu_s": s.get("cpu_s"),
                }
            )
    return {"ninja": jobs, "nvcc": steps}


def build(job: dict[str, object]) -> dict[str, object]:
    import torch.utils.cpp_extension as ce

    args = job.get("args")
    if not isinstance(args, dict):
        return {"ok": False, "message": "arguments must be an object"}
    jobs = job.get("jobs")
    if isinstance(jobs, int) and jobs > 0:
        os.environ["MAX_JOBS"] = str(jobs)
    pch = job.get("pch")
    if isinstance(pch, str) and os.path.exists(os.path.join(pch, "torch", "extension.h.gch")):
        args = {**args, "extra_include_paths": [pch, *(args.get("extra_include_paths") or [])]}
    # A CUDA build's time is nvcc's: its two front ends first, then the host compile. The
    # bindings' main.cpp (seconds, with the precompiled header) is not on that path: its compile
    # runs at a lower priority, taking what CPU the front ends leave instead of a third of it.
    behind = None
    if job.get("split") and args.get("cuda_sources"):
        nvcc_in_steps(int(os.environ.get("MAX_JOBS", "1")))
        behind = os.path.join(os.path.abspath("build"), "main.cpp")
    limit = job.get("cpu_s")
    watchdog = Watchdog(float(limit), behind) if isinstance(limit, (int, float)) else None
    os.makedirs("build", exist_ok=True)
    try:
        mod = ce.load_inline(**args, build_directory=os.path.abspath("build"), verbose=False)
    except Exception as e:
        message = str(e)[-20000:]
        cpu = watchdog.used() if watchdog else 0.0
        exceeded = watchdog is not None and (
            watchdog.exceeded or cpu >= watchdog.limit_s or any(s in message for s in CPU_SIGNALS)
        )
        return {"ok": False, "message": message, "cpu_s": round(cpu, 2), "cpu_exceeded": exceeded}
    finally:
        if watchdog is not None:
            watchdog.stop()
    shutil.copyfile(mod.__file__, "out.so")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"ok": True, "module": mod.__name__, "cpu_s": round(ru.ru_utime + ru.ru_stime, 2)}


def main() -> int:
    if sys.argv[1:2] == ["--pch"]:
        reply(precompile(json.loads(sys.stdin.read() or "[]")), lead="\n")
        return 0
    os.dup2(2, 1)  # the protocol keeps the original stdout; anything else printed goes to stderr
    import torch.utils.cpp_extension  # noqa: F401  (the start the host can make ahead of the job)

    reply({"ready": True})
    line = sys.stdin.readline()
    started = time.monotonic()
    try:
        job = json.loads(line)
    except ValueError:
        job = None
    out = build(job) if isinstance(job, dict) else {"ok": False, "message": "no job"}
    reply({**out, "wall_s": round(time.monotonic() - started, 2), "timeline": timeline(started)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
