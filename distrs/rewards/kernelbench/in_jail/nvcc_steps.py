"""Runs in the build jail in nvcc's place: nvcc's own steps, its device and host chains at once.

torch's ``load_inline`` compiles each ``.cu`` file with one ``nvcc -c`` (ninja's ``cuda_compile``
rule), and nvcc runs its steps one after another. For a file that includes
``<torch/extension.h>`` two of them parse all of torch's headers: ``cudafe++`` (the host side's
front end, about 40 s of CPU on this repository's 2-core machine) and ``cicc`` (the device side's,
45-65 s), then the host compiler compiles ``cudafe++``'s output (about 33 s). What each needs:

* ``gcc -E`` twice: the device view (``-D__CUDA_ARCH__=...``, one per architecture) and the host
  view of the source. Independent.
* ``cudafe++`` reads the host view; writes the host source and the module id (a name derived from
  the source file's name and its first external definition, which both sides give their anonymous
  namespaces and registration stubs).
* ``cicc`` per architecture reads its device view and the module id; writes PTX and the stub the
  host source includes. ``ptxas`` makes its cubin; ``fatbinary`` packs every image into the
  source of a fat binary, which the stub includes too.
* the host compile (``gcc -c``) of ``cudafe++``'s output needs all of the above.

So the one link between the two front ends is the module id. cicc can derive it itself, the same
way (``--gen_module_id_file``): here each cicc writes its own to a file of its own, beside
cudafe++ writing nvcc's, so cicc and cudafe++ run at once; before anything uses their outputs the
ids are compared. Equal (they are derived from the same source), every output is what nvcc's order
makes; different, that cicc runs again nvcc's way, reading cudafe++'s id. (The host compile stays
last and whole: precompiling its source's part before the stub beside cicc builds the same object,
but making that header costs more CPU than the compile it shortens, about 50 s against 33 s for
torch's headers, so it never made a build shorter.) The steps themselves are
nvcc's: this program asks nvcc for them (``nvcc --dryrun`` with the same arguments, which prints
each command with its flags, files and environment) and runs those commands, in an order their
inputs allow, at most ``DISTRS_KB_NVCC_JOBS`` at once; their messages are printed in nvcc's order,
and the first failing step in nvcc's order decides the exit status, as with nvcc. nvcc's
dependency file (``-MD -MF``) is made as nvcc makes it, from the files each ``gcc -E`` read.

Anything this program does not recognise in the dry run (another mode than ``-c``, a step or an
order it does not know, relocatable device code) runs nvcc itself, unchanged: the same result,
without the overlap. Standard library only; run as ``python -I -B nvcc_steps.py ARGS...`` with the
real nvcc in ``DISTRS_KB_NVCC``; where ``DISTRS_KB_NVCC_LOG`` names a file, each step's kind, start
and end (monotonic seconds) and CPU time are appended to it as JSON lines.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")
VAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
FILTER = re.compile(r"^-- Filter Dependencies -- > (.+?)\s*$")
TEMP = re.compile(r"/[^\s\",=]*tmpxft_[^\s\",]*")
SPLIT_MODES = ("-c", "--compile")
REFUSED = ("-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c", "-dlink", "--keep", "-keep")


class Unsupported(Exception):
    """A dry run this program does not split: nvcc runs as it is."""


@dataclass
class Step:
    """One command of the dry run."""

    kind: str  # preprocess, cudafe, cicc, ptxas, fatbinary, rm, deps, compile
    argv: list[str]
    index: int
    out: str | None = None
    inp: str | None = None
    device: bool = False  # a preprocess of the device view


@dataclass
class Plan:
    env: dict[str, str]
    steps: list[Step]
    notes: str = ""  # what nvcc itself printed besides its steps (its own warnings)
    module_id: str = ""
    cicc_ids: dict[int, str] = field(default_factory=dict)  # cicc step index -> its own id file


def option(argv: Sequence[str], name: str) -> str | None:
    """``NAME VALUE`` or ``NAME=VALUE`` in argv (the last one)."""
    found = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith(name + "="):
            found = a[len(name) + 1 :]
    return found


def _last(argv: Sequence[str], suffix: str) -> str | None:
    """The last argument naming a ``suffix`` file (a step's input; option values are other files)."""
    return next((a for a in reversed(argv) if a.endswith(suffix) and not a.startswith("-")), None)


def _classify(argv: list[str], index: int) -> Step:
    tool = os.path.basename(argv[0])
    if tool == "cudafe++":
        return Step("cudafe", argv, index, out=option(argv, "--gen_c_file_name"), inp=_last(argv, ".ii"))
    if tool == "cicc":
        return Step("cicc", argv, index, out=option(argv, "-o"), inp=_last(argv, ".ii"))
    if tool == "ptxas":
        return Step("ptxas", argv, index, out=option(argv, "-o"), inp=_last(argv, ".ptx"))
    if tool == "fatbinary":
        return Step("fatbinary", argv, index, out=option(argv, "--embedded-fatbin"))
    if tool == "rm" and len(argv) == 2:
        return Step("rm", argv, index, inp=argv[1])
    if "-E" in argv:
        device = any(a.startswith("-D__CUDA_ARCH__=") for a in argv)
        return Step("preprocess", argv, index, out=option(argv, "-o"), device=device)
    if "-c" in argv:
        return Step("compile", argv, index, out=option(argv, "-o"), inp=_last(argv, ".cpp"))
    raise Unsupported(f"a step this program does not know: {tool}")


def parse_dryrun(text: str, env: dict[str, str]) -> Plan:
    """The environment and the steps of ``nvcc --dryrun``'s output (its ``#$`` lines)."""
    env = dict(env)
    steps: list[Step] = []
    notes: list[str] = []
    for raw in text.splitlines():
        if not raw.startswith("#$ "):
            notes.append(raw)
            continue
        line = raw[3:].strip()
        m = FILTER.match(line)
        if m:
            steps.append(Step("deps", [], len(steps), out=m.group(1)))
            continue
        m = ASSIGN.match(line)
        if m:
            env[m.group(1)] = VAR.sub(lambda v: env.get(v.group(1), ""), m.group(2))
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            continue  # a quoted value nvcc only uses in its own expansions (INCLUDES=, LIBRARIES=)
        try:
            argv = [VAR.sub(lambda v: env.get(v.group(1), ""), a) for a in shlex.split(line)]
        except ValueError as e:
            raise Unsupported(f"an unparsable step: {e}") from None
        steps.append(_classify(argv, len(steps)))
    return check(Plan(env, steps, "".join(n + "\n" for n in notes)))


def check(plan: Plan) -> Plan:
    """``plan`` where its steps have the shape this program splits (see the module docstring)."""
    by = {
        k: [s for s in plan.steps if s.kind == k]
        for k in ("preprocess", "cudafe", "cicc", "ptxas", "fatbinary")
    }
    host = [s for s in by["preprocess"] if not s.device]
    compiles = [s for s in plan.steps if s.kind == "compile"]
    if len(by["cudafe"]) != 1 or len(host) != 1 or len(by["fatbinary"]) != 1 or len(compiles) != 1:
        raise Unsupported("not one host view, cudafe++, fatbinary and host compile")
    if not by["cicc"] or plan.steps[-1] is not compiles[0]:
        raise Unsupported("no cicc, or the host compile is not last")
    cudafe = by["cudafe"][0]
    module_id = option(cudafe.argv, "--module_id_file_name")
    if "--gen_module_id_file" not in cudafe.argv or module_id is None or cudafe.inp != host[0].out:
        raise Unsupported("cudafe++ does not make the module id from the host view")
    device_views = {s.out for s in by["preprocess"] if s.device}
    for c in by["cicc"]:
        if c.inp not in device_views or option(c.argv, "--module_id_file_name") != module_id:
            raise Unsupported("a cicc that does not read a device view and cudafe++'s module id")
        if "--gen_module_id_file" in c.argv:
            raise Unsupported("a cicc that makes its own module id")
        plan.cicc_ids[c.index] = f"{module_id}.cicc{c.index}"
    ptx = {c.out for c in by["cicc"]}
    if any(p.inp not in ptx for p in by["ptxas"]):
        raise Unsupported("a ptxas that does not read a cicc's output")
    plan.module_id = module_id
    return plan


def own_id(argv: list[str], id_file: str) -> list[str]:
    """A cicc command that writes its module id to ``id_file`` instead of reading nvcc's."""
    out = list(argv)
    i = out.index("--module_id_file_name")
    out[i + 1] = id_file
    out.insert(i, "--gen_module_id_file")
    return out


def with_deps(argv: list[str], depfile: str, target: str) -> list[str]:
    """A ``gcc -E`` writing the files it read to ``depfile`` as it preprocesses."""
    return [*argv, "-MD", "-MF", depfile, "-MT", target]


def write_deps(path: str, target: str, parts: list[str]) -> None:
    """nvcc's dependency file: every file each view read (in the dry run's order, each once), one
    a line; made from the preprocessors' own lists (``parts``, removed)."""
    files: dict[str, None] = {}
    for part in parts:
        text = _read(part).replace("\\\n", " ")
        _remove(part)
        files.update(dict.fromkeys(text.split(":", 1)[1].split() if ":" in text else []))
    with open(path, "w") as f:
        f.write(f"{target} : " + " \\\n    ".join(files) + "\n")


def _collect(p: subprocess.Popen[bytes]) -> tuple[bytes, bytes, float]:
    """A started step's stdout, stderr and CPU time (with its children's), once it has ended."""
    got: dict[str, bytes] = {}

    def drain(name: str, stream: object) -> None:
        got[name] = stream.read()  # type: ignore[attr-defined]

    readers = [threading.Thread(target=drain, args=(n, f)) for n, f in (("out", p.stdout), ("err", p.stderr))]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()
    return got.get("out", b""), got.get("err", b""), ru.ru_utime + ru.ru_stime


class Runner:
    """Runs steps, at most ``jobs`` at once, keeping each one's output for nvcc's order."""

    def __init__(self, env: dict[str, str], jobs: int) -> None:
        self.env = env
        self._slots = threading.Semaphore(max(1, jobs))
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self.results: dict[int, tuple[int, bytes, bytes]] = {}
        self.ran: list[list[str]] = []  # every command run, in the order started
        # (kind, start, end, CPU seconds) of each: monotonic clock; CPU with the step's children
        self.times: list[tuple[str, float, float, float]] = []
        self.stopped = False

    def run(self, step: Step, argv: list[str] | None = None) -> int:
        with self._slots:
            with self._lock:
                if self.stopped:
                    return 1
                self.ran.append(argv or step.argv)
                began = time.monotonic()
                p = subprocess.Popen(
                    argv or step.argv,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                self._procs.add(p)
            out, err, cpu = _collect(p)
            with self._lock:
                self._procs.discard(p)
        self.results[step.index] = (p.returncode, out, err)
        self.times.append((step.kind, began, time.monotonic(), cpu))
        return p.returncode

    def stop(self) -> None:
        """End every running step (an earlier step of nvcc's order failed)."""
        with self._lock:
            self.stopped = True
            for p in self._procs:
                p.kill()


def execute(plan: Plan, nvcc_argv: Sequence[str], jobs: int, runner: Runner | None = None) -> int:
    """Run ``plan``'s steps (see the module docstring); the exit status nvcc would give."""
    runner = runner or Runner(plan.env, jobs)
    steps = plan.steps
    sys.stderr.write(plan.notes)
    target = option(nvcc_argv, "-o") or ""
    deps = next((s for s in steps if s.kind == "deps"), None)
    views = [s for s in steps if s.kind == "preprocess"]

    def preprocess(s: Step) -> None:
        runner.run(s, with_deps(s.argv, f"{deps.out}.view{s.index}", target) if deps and deps.out else None)

    _all(preprocess, views)
    if _first_failure(runner, views) is not None:
        return _report(runner, steps)
    if deps is not None and deps.out:
        write_deps(deps.out, target, [f"{deps.out}.view{s.index}" for s in views])

    cudafe = next(s for s in steps if s.kind == "cudafe")
    ciccs = [s for s in steps if s.kind == "cicc"]

    def front_end(s: Step) -> None:
        if s.kind == "cudafe":
            if runner.run(s) != 0:
                runner.stop()  # nvcc would not have started cicc: its messages are cudafe++'s
                return
            return
        if runner.run(s, own_id(s.argv, plan.cicc_ids[s.index])) == 0:
            for p in steps:
                if p.kind == "ptxas" and p.inp == s.out and runner.run(p) != 0:
                    return

    _all(front_end, [cudafe, *ciccs])
    if runner.results.get(cudafe.index, (1,))[0] != 0:
        return _report(runner, steps, upto=cudafe.index)
    nvcc_id = _read(plan.module_id)
    for c in ciccs:
        if runner.results.get(c.index, (1,))[0] == 0 and _read(plan.cicc_ids[c.index]) != nvcc_id:
            # derived differently after all: nvcc's way, reading cudafe++'s id, and its ptxas again
            runner.run(c)
            for p in steps:
                if p.kind == "ptxas" and p.inp == c.out and runner.results[c.index][0] == 0:
                    runner.run(p)
        _remove(plan.cicc_ids[c.index])
    if _first_failure(runner, steps) is not None:
        return _report(runner, steps)
    for s in steps:
        if s.kind == "rm" and s.inp is not None:
            _remove(s.inp)  # nvcc's own clean-up of a file that may not exist
        elif s.kind in ("fatbinary", "compile") and runner.run(s) != 0:
            break
    return _report(runner, steps)


def temporaries(plan: Plan) -> set[str]:
    """The intermediate files of this compile, as nvcc removes them when it is done: every file
    named ``tmpxft_PID_...`` (the dry run's nvcc's PID) in the directories its steps name, the
    steps' own leftovers (a stopped cicc's) included."""
    prefixes: set[str] = set()
    for s in plan.steps:
        for path in TEMP.findall(" ".join(s.argv)):
            head, name = os.path.split(path)
            prefixes.add(os.path.join(head, "_".join(name.split("_")[:2]) + "_"))
    return {p for prefix in prefixes for p in glob.glob(glob.escape(prefix) + "*")}


def _all(fn: Callable[[Step], None], steps: list[Step]) -> None:
    threads = [threading.Thread(target=fn, args=(s,)) for s in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _first_failure(runner: Runner, steps: list[Step]) -> Step | None:
    return next((s for s in steps if s.index in runner.results and runner.results[s.index][0] != 0), None)


def _report(runner: Runner, steps: list[Step], upto: int | None = None) -> int:
    """Each run step's output in nvcc's order, up to and including the first that failed; its status."""
    for s in steps:
        if s.index not in runner.results or (upto is not None and s.index > upto):
            continue
        code, out, err = runner.results[s.index]
        sys.stdout.buffer.write(out)
        sys.stderr.buffer.write(err)
        if code != 0:
            sys.stdout.flush()
            sys.stderr.flush()
            return code if code > 0 else 1
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def plan_for(nvcc: str, argv: Sequence[str], env: dict[str, str]) -> Plan:
    """nvcc's steps for ``argv`` (Unsupported where this program does not split them)."""
    if not any(a in SPLIT_MODES for a in argv) or any(a in REFUSED for a in argv) or "--dryrun" in argv:
        raise Unsupported("not a plain compile")
    r = subprocess.run(
        [nvcc, "--dryrun", *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise Unsupported("nvcc refused the arguments")
    return parse_dryrun(r.stderr + r.stdout, env)


def main(argv: list[str]) -> int:
    nvcc = os.environ.get("DISTRS_KB_NVCC", "nvcc")
    jobs = int(os.environ.get("DISTRS_KB_NVCC_JOBS", "2") or 2)
    try:
        if jobs < 2:
            raise Unsupported("one job at a time: nothing to run beside anything")
        plan = plan_for(nvcc, argv, dict(os.environ))
    except Unsupported:
        os.execv(nvcc, [nvcc, *argv])
    runner = Runner(plan.env, jobs)
    try:
        return execute(plan, argv, jobs, runner)
    finally:
        for path in temporaries(plan):
            _remove(path)
        log = os.environ.get("DISTRS_KB_NVCC_LOG")
        if log:  # where the time went, for the builder's reply (benchmarks/compile.py reads it)
            with contextlib.suppress(OSError), open(log, "a") as f:
                f.writelines(
                    json.dumps({"step": k, "start": a, "end": b, "cpu_s": round(c, 2)}) + "\n"
                    for k, a, b, c in runner.times
                )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
