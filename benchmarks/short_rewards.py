"""Short rewards end to end: ``distrs up`` with default settings against doing it in-process.

Two ratios, each measured side by side in one run, interleaved (a baseline run, then per round a
service run and a baseline run; the ratio is the mean service rate over the mean baseline rate,
and every run's rate is reported, so a change in the machine's load shows up as a spread):

* **math** — ``--math`` realistic completions (varied ``\\boxed{}`` answers: integers, fractions,
  radicals, decimals, sets, negative numbers; about a fifth wrong, some without a box, some with
  several kilobytes of reasoning) scored through the service (``math`` reward type, first
  submit to last result, with ``distrs_client``) against ``math_verify.parse`` + ``verify``
  called in-process from as many processes as cores. Every round scores new completions (the
  same ones on both sides), so the service's cache of parsed ground truths helps only with the
  repeats within a round, as a GRPO group's shared ground truth would. Target: >= 1.0x.
* **python** — ``--python`` small stdin/stdout programs x 3 tests (about a tenth wrong) through
  the service (``python`` reward type, full sandbox) against the same programs run as plain
  ``python main.py`` subprocesses from as many threads as cores. Target: >= 2.0x.
* **cpp** — ``--cpp`` competitive-programming C++ programs x 3 tests (most open with
  ``#include <bits/stdc++.h>``, as such solutions do; about a tenth wrong) through the service
  (``cpp`` reward type: compile stage, then run stage, full sandbox) against plain
  ``g++ -std=c++17 -O2 -pipe`` (the judge's default flags) then each test run as a subprocess,
  from as many threads as cores. Every round compiles new programs (each carries its round and
  number in a comment, the same on both sides), so the compile workers' cache of recent
  compiles never answers for a compile. The worker's precompiled ``bits/stdc++.h`` is made
  before the service starts, as the worker image has it made at build (its time is reported);
  the baseline has none, as a plain ``g++`` has none. Target: >= 2.0x.

The service is started as a user would, ``distrs up --insecure --port 0`` in a subprocess, with
no other flags; one small warm-up batch of each type runs first (its time is reported apart:
it includes starting the worker processes). Verdicts of the service and the baseline are
compared and the number that differ is reported.

    .venv/bin/python benchmarks/short_rewards.py          # writes benchmarks/results/short_rewards.{json,md}
    .venv/bin/python benchmarks/short_rewards.py --only cpp --rounds 1  # short_rewards_cpp.{json,md}
    .venv/bin/python benchmarks/short_rewards.py --quick  # smaller sizes for a smoke test
    .venv/bin/python benchmarks/short_rewards.py --quick --only python \
        --service-env DISTRS_JUDGE_PYTHON_FORK_SERVER=0   # one workload; a setting for the service

Besides the rates, each run's CPU per item is reported: the service's (``distrs up``, its workers
and their jails: counted by a cpuacct cgroup the service is started in where the benchmark may
make one, see :class:`CpuAccount`; else its process tree, which misses the jails) against the
benchmark's own tree in the baseline (its pool processes and the subprocesses it reaped). CPU is
steadier than wall-clock rates on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"math": 1.0, "python": 2.0, "cpp": 2.0}
WORKLOADS = ("math", "python", "cpp")


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# --- workloads ----------------------------------------------------------------------------------

_FILLER = (
    "We first restate the problem and note the constraints. Consider the expression step by step; "
    "expanding the product and collecting like terms gives a quadratic in $x$, whose discriminant "
    "$b^2-4ac$ tells us how many real roots there are. Substituting back, we check each case. "
)


def _answer_pair(rng: random.Random) -> tuple[str, str, str]:
    """(ground truth, a correct answer written as a model might, a wrong answer)."""
    kind = rng.randrange(7)
    if kind == 0:
        n = rng.randint(-50, 2000)
        return str(n), str(n), str(n + rng.choice([-2, -1, 1, 3]))
    if kind == 1:
        a, b = rng.randint(1, 30), rng.randint(2, 31)
        return (
            f"\\frac{{{a}}}{{{b}}}",
            rng.choice([f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}"]),
            (f"\\frac{{{a + 1}}}{{{b}}}"),
        )
    if kind == 2:
        a, b = rng.randint(1, 9), rng.choice([2, 3, 5, 6, 7])
        return f"{a}\\sqrt{{{b}}}", f"{a}\\sqrt{{{b}}}", f"{a + 1}\\sqrt{{{b}}}"
    if kind == 3:
        x = rng.randint(1, 999) / 100
        return f"{x}", f"{x:.2f}", f"{x + 0.5:.2f}"
    if kind == 4:
        a, b = sorted(rng.sample(range(-9, 10), 2))
        return f"\\{{{a}, {b}\\}}", f"\\{{{b}, {a}\\}}", f"\\{{{a}, {b + 1}\\}}"
    if kind == 5:
        n = rng.randint(2, 40)
        return f"{n}\\pi", f"{n}\\pi", f"{n + 1}\\pi"
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"{a}x+{b}", f"{a}x + {b}", f"{b}x + {a}"


def math_items(n: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        gold, right, wrong = _answer_pair(rng)
        ans = wrong if rng.random() < 0.2 else right
        body = _FILLER * (rng.choice([1, 2, 3]) if rng.random() < 0.8 else rng.randint(15, 40))
        style = rng.random()
        if style < 0.85:
            text = f"{body}Therefore the answer is $\\boxed{{{ans}}}$."
        elif style < 0.95:  # corrects itself: the last box counts
            text = f"{body}At first we get $\\boxed{{{wrong}}}$, but rechecking, the answer is $\\boxed{{{ans}}}$."
        else:  # no box at all
            text = f"{body}So the final answer is ${ans}$."
        out.append({"completion": text, "ground_truth": gold})
    return out


_PROGRAMS = [
    ("a, b = map(int, input().split())\nprint(a + b)\n", lambda a, b: f"{a + b}\n"),
    ("a, b = map(int, input().split())\nprint(a * b)\n", lambda a, b: f"{a * b}\n"),
    ("a, b = map(int, input().split())\nprint(max(a, b))\n", lambda a, b: f"{max(a, b)}\n"),
    (
        "a, b = map(int, input().split())\nprint(sum(range(min(a, b), max(a, b) + 1)))\n",
        lambda a, b: f"{sum(range(min(a, b), max(a, b) + 1))}\n",
    ),
    (
        "import sys\nxs = sorted(map(int, sys.stdin.read().split()))\nprint(*xs)\n",
        lambda a, b: f"{min(a, b)} {max(a, b)}\n",
    ),
    (
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n"
        "a, b = map(int, input().split())\nprint(gcd(abs(a), abs(b)))\n",
        lambda a, b: f"{__import__('math').gcd(a, b)}\n",
    ),
]


def python_items(n: int, seed: int = 11) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        code, ref = _PROGRAMS[i % len(_PROGRAMS)]
        if rng.random() < 0.1:  # a wrong program: off by one
            code = (
                code.replace("print(", "print(1 + ", 1)
                if "print(*" not in code
                else code.replace("xs)", "xs[::-1])")
            )
        tests = []
        for _ in range(3):
            a, b = rng.randint(-100, 100), rng.randint(-100, 100)
            tests.append({"stdin": f"{a} {b}\n", "expected_stdout": ref(a, b)})
        out.append({"code": f"# program {i}\n" + code, "tests": tests, "compare": "tokens"})
    return out


# Each: (program body after the includes, reference answer of a test's numbers). The programs read
# ``n`` then ``n`` integers.
_CPP_PROGRAMS: list[tuple[str, Any]] = [
    (
        "int main(){int n;cin>>n;vector<long long>a(n);for(auto&x:a)cin>>x;sort(a.begin(),a.end());"
        "cout<<accumulate(a.begin(),a.end(),0LL)<<' '<<a.front()<<' '<<a.back()<<'\\n';}",
        lambda xs: f"{sum(xs)} {min(xs)} {max(xs)}\n",
    ),
    (
        "int main(){int n;cin>>n;set<long long>s;for(int i=0;i<n;i++){long long x;cin>>x;s.insert(x);}"
        "cout<<s.size()<<'\\n';}",
        lambda xs: f"{len(set(xs))}\n",
    ),
    (
        "int main(){int n;cin>>n;long long best=LLONG_MIN,cur=0;for(int i=0;i<n;i++){long long x;cin>>x;"
        "cur=max(x,cur+x);best=max(best,cur);}cout<<best<<'\\n';}",
        lambda xs: f"{_kadane(xs)}\n",
    ),
    (
        "int main(){int n;cin>>n;map<long long,int>m;for(int i=0;i<n;i++){long long x;cin>>x;m[x]++;}"
        "int best=0;for(auto&[k,v]:m)best=max(best,v);cout<<best<<'\\n';}",
        lambda xs: f"{max(xs.count(x) for x in xs)}\n",
    ),
    (
        "int main(){int n;cin>>n;long long g=0;for(int i=0;i<n;i++){long long x;cin>>x;g=__gcd(g,llabs(x));}"
        "cout<<g<<'\\n';}",
        lambda xs: f"{_gcd_all(xs)}\n",
    ),
    (
        "int main(){int n;cin>>n;vector<long long>a(n);for(auto&x:a)cin>>x;reverse(a.begin(),a.end());"
        "for(int i=0;i<n;i++)cout<<a[i]<<(i+1<n?' ':'\\n');}",
        lambda xs: " ".join(map(str, reversed(xs))) + "\n",
    ),
]
_CPP_HEADERS = ("#include <bits/stdc++.h>\nusing namespace std;\n",) * 5 + (
    "#include <iostream>\n#include <vector>\n#include <set>\n#include <map>\n#include <algorithm>\n"
    "#include <numeric>\n#include <climits>\n#include <cstdlib>\nusing namespace std;\n",
)


def _kadane(xs: list[int]) -> int:
    best, cur = xs[0], 0
    for x in xs:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best


def _gcd_all(xs: list[int]) -> int:
    import math

    g = 0
    for x in xs:
        g = math.gcd(g, abs(x))
    return g


def cpp_items(n: int, seed: int = 13) -> list[dict[str, Any]]:
    """``n`` programs, new for every seed: their sources differ from every other seed's."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body, ref = _CPP_PROGRAMS[i % len(_CPP_PROGRAMS)]
        if rng.random() < 0.1:  # a wrong program: off by one in what it prints
            body = body.replace("cout<<", "cout<<1+", 1)
        tests = []
        for _ in range(3):
            xs = [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 30))]
            tests.append({"stdin": f"{len(xs)}\n{' '.join(map(str, xs))}\n", "expected_stdout": ref(xs)})
        head = _CPP_HEADERS[rng.randrange(len(_CPP_HEADERS))]
        code = f"{head}// program {seed}-{i}\n{body}\n"
        out.append({"code": code, "tests": tests, "compare": "tokens"})
    return out


# --- baselines ----------------------------------------------------------------------------------

_BOX = re.compile(r"\\boxed\{")


def _verify_one(item: dict[str, str]) -> bool:
    from math_verify import parse, verify

    gold = parse("$" + item["ground_truth"] + "$")
    text = item["completion"]
    # a user's for-loop: the last boxed answer if any, else the whole text
    starts = [m.start() for m in _BOX.finditer(text)]
    pred = parse(text[starts[-1] :] if starts else text)
    return bool(verify(gold, pred))


def _verify_chunk(items: list[dict[str, str]]) -> list[bool]:
    return [_verify_one(it) for it in items]


def _warm() -> int:
    import math_verify  # noqa: F401

    return os.getpid()


def math_baseline(
    pool: ProcessPoolExecutor, items: list[dict[str, str]], procs: int
) -> tuple[float, list[bool]]:
    chunk = max(1, len(items) // (procs * 8))
    t0 = time.perf_counter()
    parts = pool.map(_verify_chunk, [items[i : i + chunk] for i in range(0, len(items), chunk)])
    verdicts = [v for part in parts for v in part]
    return time.perf_counter() - t0, verdicts


def _passes(cmd: list[str], cwd: Path, tests: list[dict[str, Any]]) -> bool:
    """Whether ``cmd`` run in ``cwd`` passes every test (exit 0, same output words)."""
    ok = True
    for t in tests:
        p = subprocess.run(cmd, cwd=cwd, input=t["stdin"], capture_output=True, text=True, timeout=10)
        ok = ok and p.returncode == 0 and p.stdout.split() == t["expected_stdout"].split()
    return ok


def _baseline(
    run: Callable[[Path, int, dict[str, Any]], bool], items: list[dict[str, Any]], threads: int, prefix: str
) -> tuple[float, list[bool]]:
    """``run`` over every item from ``threads`` threads: (wall seconds, verdicts in item order)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, ThreadPoolExecutor(threads) as ex:
        t0 = time.perf_counter()
        verdicts = list(ex.map(lambda a: run(Path(tmp), *a), enumerate(items)))
        return time.perf_counter() - t0, verdicts


def _run_program(work: Path, i: int, item: dict[str, Any]) -> bool:
    d = work / f"p{i}"
    d.mkdir(exist_ok=True)
    (d / "main.py").write_text(item["code"])
    return _passes([sys.executable, "main.py"], d, item["tests"])


def python_baseline(items: list[dict[str, Any]], threads: int) -> tuple[float, list[bool]]:
    return _baseline(_run_program, items, threads, "distrs-bench-py-")


CXX = ["g++", "-std=c++17", "-O2", "-pipe"]  # the judge's default compiler and flags


def _compile_and_run(work: Path, i: int, item: dict[str, Any]) -> bool:
    d = work / f"c{i}"
    d.mkdir(exist_ok=True)
    (d / "main.cpp").write_text(item["code"])
    c = subprocess.run([*CXX, "-o", "prog", "main.cpp"], cwd=d, capture_output=True, timeout=120)
    if c.returncode != 0:
        return False
    return _passes(["./prog"], d, item["tests"])


def cpp_baseline(items: list[dict[str, Any]], threads: int) -> tuple[float, list[bool]]:
    return _baseline(_compile_and_run, items, threads, "distrs-bench-cpp-")


def make_cpp_header(extra_env: dict[str, str]) -> float:
    """Make the workers' precompiled ``bits/stdc++.h`` where they look for it (their default
    directory on this machine), as the worker image has it made at build; its seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
    env.update(extra_env)
    code = "from distrs.rewards import cxx_pch; import sys; sys.exit(cxx_pch.main([cxx_pch.default_root()]))"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=False, capture_output=True)
    return time.perf_counter() - t0


# --- the service --------------------------------------------------------------------------------


def _tree_cpu(root: int, exclude: int | None = None) -> float:
    """CPU seconds of ``root`` and its live descendants (``exclude``'s subtree left out), with
    what each has reaped of its exited children (utime + stime + cutime + cstime)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(d.name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / tick
    total = 0.0
    for pid in cpu:
        p: int | None = pid
        while p is not None and p != exclude:
            if p == root:
                total += cpu[pid]
                break
            p = parent.get(p)
    return total


class CpuAccount:
    """A cgroup v1 ``cpuacct`` group of its own, where this process may make one: everything
    started in it is counted, the jails included. A jail's processes live in a PID namespace
    whose init bubblewrap does not reap into its parent's accounting (``bwrap --unshare-pid
    g++ ...`` reports a few ms of children's CPU for a 4 s compile), so the process tree alone
    leaves the service's jailed work out. The sandbox moves runs into memory and pids groups
    only, never out of this one."""

    def __init__(self) -> None:
        self.path: Path | None = None
        for mount in ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"):
            base = Path(mount)
            try:
                own = next(
                    ln.split(":", 2)[2]
                    for ln in Path("/proc/self/cgroup").read_text().splitlines()
                    if "cpuacct" in ln.split(":", 2)[1].split(",")
                )
                d = base / own.lstrip("/") / f"distrs-bench-{os.getpid()}"
                d.mkdir()
            except (OSError, StopIteration, IndexError):
                continue
            self.path = d
            return

    def join_argv(self) -> list[str]:
        """A prefix that moves the command into the group before it starts anything."""
        if self.path is None:
            return []
        return ["sh", "-c", f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"', "sh"]

    def cpu_s(self) -> float:
        assert self.path is not None
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()


class Service:
    """``distrs up --insecure --port 0`` in a subprocess, as a user starts it."""

    def __init__(
        self, log: Path, extra_env: dict[str, str] | None = None, prefix: list[str] | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")}
        env.update(extra_env or {})
        env["PYTHONUNBUFFERED"] = "1"
        self.log = log
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "distrs.cli", "up", "--insecure", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(log, "wb"),  # noqa: SIM115 - owned by the process
            cwd=ROOT,
            start_new_session=True,
        )
        self.url = ""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"distrs up exited; see {log}")
            m = re.search(r"DistRS is up at (\S+)", line)
            if m:
                self.url = m.group(1)
                return
        raise RuntimeError("distrs up did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


async def through_service(
    url: str, task: str, batch: str, reward_type: str, items: list[dict[str, Any]]
) -> tuple[float, list[Any]]:
    from distrs_client import AsyncRewardClient

    async with AsyncRewardClient(url, timeout_s=120) as client:
        t0 = time.perf_counter()
        await client.start_batch(task, batch, size=len(items), reward_type=reward_type)
        for i, p in enumerate(items):
            client.submit(task, batch, f"{batch}-{i}", reward_type, p)
        results = await client.results(task, batch, timeout=600)
        return time.perf_counter() - t0, results


# --- driver -------------------------------------------------------------------------------------


def _compare(
    name: str,
    n_items: int,
    base: list[tuple[float, list[bool]]],
    svc: list[tuple[float, list[Any]]],
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    rates = [n_items / t for t, _ in base]
    svc_rates = [n_items / t for t, _ in svc]
    base_rate = sum(rates) / len(rates)
    svc_rate = sum(svc_rates) / len(svc_rates)
    statuses: dict[str, int] = {}
    for r in svc[-1][1]:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    # the last service round against the baseline run right after it, on the same items
    differ = sum(1 for r, b in zip(svc[-1][1], base[-1][1], strict=True) if (r.status == "ok") != b)
    ratio = svc_rate / base_rate
    return {
        "items": n_items,
        "baseline_per_s": [round(r, 1 if r >= 10 else 3) for r in rates],
        "service_per_s": [round(r, 1 if r >= 10 else 3) for r in svc_rates],
        "ratio": round(ratio, 3),
        "target": TARGETS[name],
        "met": ratio >= TARGETS[name],
        "service_statuses": statuses,
        "verdicts_differing": differ,
        "cpu_ms_per_item": {k: [round(1000 * c / n_items, 2) for c in v] for k, v in (cpu or {}).items()},
    }


async def _amain(args: argparse.Namespace) -> dict[str, Any]:
    cores = _cores()
    maths = math_items(args.math)
    progs = python_items(args.python)
    cpps = cpp_items(args.cpp)
    out: dict[str, Any] = {}
    service_env = dict(kv.split("=", 1) for kv in args.service_env)
    if args.only in (None, "cpp"):
        out["cpp_header_s"] = round(make_cpp_header(service_env), 2)
    with tempfile.TemporaryDirectory(prefix="distrs-bench-sr-") as tmp:
        acct = CpuAccount()
        svc = Service(Path(tmp) / "up.log", service_env, acct.join_argv())
        out["service_cpu_from"] = (
            "its cpuacct cgroup (jails included)"
            if acct.path is not None
            else "its process tree (jailed work not counted: no cpuacct cgroup could be made)"
        )
        me = os.getpid()

        def base_cpu() -> float:
            return _tree_cpu(me, exclude=svc.proc.pid)

        def svc_cpu() -> float:
            return acct.cpu_s() if acct.path is not None else _tree_cpu(svc.proc.pid)

        try:
            t = time.perf_counter()
            if args.only in (None, "math"):
                await through_service(svc.url, "warm", "math", "math", math_items(40, seed=1))
            if args.only in (None, "python"):
                await through_service(svc.url, "warm", "py", "python", python_items(20, seed=2))
            if args.only in (None, "cpp"):
                await through_service(svc.url, "warm", "cpp", "cpp", cpp_items(10, seed=3))
            out["warmup_s"] = round(time.perf_counter() - t, 2)
            print(f"service up at {svc.url}; warm-up {out['warmup_s']} s", flush=True)

            if args.only in (None, "math"):
                with ProcessPoolExecutor(cores) as pool:
                    for f in [pool.submit(_warm) for _ in range(cores)]:
                        f.result()
                    math_baseline(pool, maths[:100], cores)  # warm caches
                    c0 = base_cpu()
                    mb = [math_baseline(pool, maths, cores)]
                    mcpu: dict[str, list[float]] = {"baseline": [base_cpu() - c0], "service": []}
                    ms = []
                    for r in range(args.rounds):
                        # fresh completions every round (the same for both sides): the checker's
                        # cache of parsed ground truths only helps with repeats within a round, as
                        # in training
                        items = maths if r == 0 else math_items(args.math, seed=7 + r)
                        c0 = svc_cpu()
                        ms.append(await through_service(svc.url, "bench-math", f"b{r}", "math", items))
                        mcpu["service"].append(svc_cpu() - c0)
                        c0 = base_cpu()
                        mb.append(math_baseline(pool, items, cores))
                        mcpu["baseline"].append(base_cpu() - c0)
                out["math"] = _compare("math", len(maths), mb, ms, mcpu)
                print(f"math: {out['math']}", flush=True)

            if args.only in (None, "python"):
                c0 = base_cpu()
                pb = [python_baseline(progs, cores)]
                pcpu: dict[str, list[float]] = {"baseline": [base_cpu() - c0], "service": []}
                ps = []
                for r in range(args.rounds):
                    c0 = svc_cpu()
                    ps.append(await through_service(svc.url, "bench-py", f"b{r}", "python", progs))
                    pcpu["service"].append(svc_cpu() - c0)
                    c0 = base_cpu()
                    pb.append(python_baseline(progs, cores))
                    pcpu["baseline"].append(base_cpu() - c0)
                out["python"] = _compare("python", len(progs), pb, ps, pcpu)
                print(f"python: {out['python']}", flush=True)

            if args.only in (None, "cpp"):
                c0 = base_cpu()
                cb = [cpp_baseline(cpps, cores)]
                ccpu: dict[str, list[float]] = {"baseline": [base_cpu() - c0], "service": []}
                cs = []
                for r in range(args.rounds):
                    # new programs every round (the same for both sides): no compile is answered
                    # from a compile worker's cache of recent compiles
                    items = cpp_items(args.cpp, seed=13 + 1000 * (r + 1))
                    c0 = svc_cpu()
                    cs.append(await through_service(svc.url, "bench-cpp", f"b{r}", "cpp", items))
                    ccpu["service"].append(svc_cpu() - c0)
                    c0 = base_cpu()
                    cb.append(cpp_baseline(items, cores))
                    ccpu["baseline"].append(base_cpu() - c0)
                out["cpp"] = _compare("cpp", len(cpps), cb, cs, ccpu)
                print(f"cpp: {out['cpp']}", flush=True)
        finally:
            svc.stop()
            acct.remove()
    out.update(
        benchmark="short_rewards",
        command=" ".join([Path(sys.executable).name, *sys.argv]),
        machine={
            "cores": cores,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
    )
    return out


def _markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# Short rewards end to end: `distrs up` (defaults) against in-process",
        "",
        f"Machine: {m['cores']} cores, {m['platform']}, Python {m['python']}; "
        f"load average at the end {', '.join(str(x) for x in m['load_average_at_end'])} "
        "(the machine is shared; each ratio is measured side by side, interleaved: baseline, then service and baseline again per round).",
        "",
        "| workload | baseline (per s, each round) | service (per s, each round) | ratio of the means | target | met "
        "| CPU ms per item: baseline / service |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {
        "math": "math: math-verify in-process, one process per core",
        "python": "python x 3 tests: plain `python main.py`, one thread per core",
        "cpp": "cpp x 3 tests: plain `g++ -std=c++17 -O2 -pipe` then `./prog`, one thread per core",
    }
    for k in WORKLOADS:
        if k not in res:
            continue
        r = res[k]
        cpu = r.get("cpu_ms_per_item", {})
        cpu_text = " / ".join(
            ", ".join(str(x) for x in cpu.get(side, [])) or "-" for side in ("baseline", "service")
        )
        b = " / ".join(str(x) for x in r["baseline_per_s"])
        sv = " / ".join(str(x) for x in r["service_per_s"])
        lines.append(
            f"| {labels[k]} ({r['items']:,} items) | {b} | {sv} | {r['ratio']:.2f} "
            f"| >= {r['target']:.2f} | {'yes' if r['met'] else 'no'} | {cpu_text} |"
        )
    done = [k for k in WORKLOADS if k in res]
    lines += [
        "",
        "Service statuses: "
        + ", ".join(f"{k} {res[k]['service_statuses']}" for k in done)
        + "; verdicts differing from the baseline: "
        + ", ".join(f"{k} {res[k]['verdicts_differing']}" for k in done)
        + ".",
        f"Service CPU counted from {res.get('service_cpu_from', 'its process tree')}.",
        f"Warm-up (40 math + 20 python + 10 cpp requests, or those of --only, includes starting the "
        f"workers): {res['warmup_s']} s."
        + (
            f" The workers' precompiled bits/stdc++.h was made before the service started, as the "
            f"worker image's build makes it: {res['cpp_header_s']} s (about 1 s where it already existed: "
            "the command only finds it)."
            if "cpp_header_s" in res
            else ""
        ),
        "",
        f"Command: `{res['command']}`",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--math", type=int, default=2000, help="Math completions.")
    ap.add_argument("--python", type=int, default=300, help="Python programs (3 tests each).")
    ap.add_argument("--cpp", type=int, default=300, help="C++ programs (3 tests each).")
    ap.add_argument("--rounds", type=int, default=2, help="Service runs, each followed by a baseline run.")
    ap.add_argument("--quick", action="store_true", help="Small sizes (smoke test).")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--only", choices=WORKLOADS, help="Run one workload only.")
    ap.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A setting for the service (e.g. DISTRS_JUDGE_PYTHON_FORK_SERVER=0); repeatable.",
    )
    args = ap.parse_args()
    if args.quick:
        args.math, args.python, args.cpp, args.rounds = 300, 40, 40, 1
    res = asyncio.run(_amain(args))
    args.out.mkdir(parents=True, exist_ok=True)
    # one workload's run goes to a file of its own, so that it never overwrites the others' figures
    name = f"short_rewards_{args.only}" if args.only else "short_rewards"
    (args.out / f"{name}.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / f"{name}.md").write_text(_markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
