"""The C serve loops (``distrs/scaling/_serve.c``) against the Python ones (``simulate.py``).

They must agree to the bit: the same start times, the same early failures at the same request
(the worker heap then holds the same times in the same layout), the same probes and decisions.
The tests that need the extension skip where it is not built; one test fails where a C compiler
is present and the extension is not (an install that silently fell back to the slow loops).
"""

from __future__ import annotations

import heapq
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distrs
from distrs.core.priority import QueuePolicy
from distrs.scaling import serve_native
from distrs.scaling.free_flow import FreeFlow
from distrs.scaling.search import search
from distrs.scaling.simulate import Simulator, serve_fcfs, serve_priority

from .build import TWO, workload

try:
    from distrs.scaling import _serve as KERNEL  # type: ignore[attr-defined]
except ImportError:
    KERNEL = None

needs_kernel = pytest.mark.skipif(
    KERNEL is None, reason="distrs.scaling._serve is not built (no C compiler when installed)"
)
REPO = Path(distrs.__file__).resolve().parents[1]


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def test_the_extension_is_built_where_a_c_compiler_is():
    if _compiler() is None:
        pytest.skip("no C compiler here: the Python serve loops stand in")
    assert KERNEL is not None, (
        "a C compiler is present but distrs.scaling._serve is not built: "
        "pip install -e . (or python setup.py build_ext --inplace)"
    )


def _loops_in_a_fresh_interpreter(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != serve_native.ENV}
    if env_value is not None:
        env[serve_native.ENV] = env_value
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    code = "from distrs.scaling import serve_native; print(serve_native.SERVE_LOOPS)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_the_environment_variable_forces_the_python_loops(value):
    assert _loops_in_a_fresh_interpreter(value) == "python"


@needs_kernel
def test_the_native_loops_are_the_default_where_built():
    assert _loops_in_a_fresh_interpreter(None) == "native"
    assert _loops_in_a_fresh_interpreter("1") == "native"


def test_the_simulator_takes_the_loops_in_use():
    wl = workload(TWO, [0.0], [[1.0, 1.0]])
    assert Simulator(wl, wl.batch_T + 1).native is serve_native.KERNEL
    assert ("native" if serve_native.KERNEL is not None else "python") == serve_native.SERVE_LOOPS


# ---- the loops themselves ----------------------------------------------------------------------


def _case(seed: int, n: int, workers: int, ties: bool, tight: bool, levels: int, any_perm: bool):
    """A stage's queue: arrivals (ties when rounded), run times, ranks (EBF-like: a level, then
    arrival; or any permutation), worker-free times (idle ones at -inf, busy ones, maybe more
    workers than requests), wait limits (none, must-not-wait, bounded) and finish limits."""
    rng = np.random.default_rng(seed)
    arr = np.sort(np.round(rng.uniform(0, 60, n), 0 if ties else 6))
    svc = np.round(rng.exponential(4, n), 1 if ties else 6) + 0.1
    if any_perm:
        rank = rng.permutation(n)
    else:
        level = rng.integers(0, levels, n)
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(level, kind="stable")] = np.arange(n)
    nbusy = int(rng.integers(0, workers + 1))
    busy = np.round(rng.uniform(-5, 20, nbusy), 0 if ties else 6)
    free = [-np.inf] * (workers - nbusy) + busy.tolist()
    heapq.heapify(free)
    kind = rng.integers(0, 3, n) if tight else np.zeros(n, dtype=np.int64)
    wait_limit = np.where(kind == 0, np.inf, np.where(kind == 1, arr, arr + rng.uniform(0, 3, n)))
    limit = arr + svc + (rng.uniform(0, 40, n) if tight else 1e9)
    return arr, svc, rank, free, wait_limit, limit


def _bits(x: list[float] | None) -> bytes | None:
    return None if x is None else np.asarray(x, dtype=np.float64).tobytes()


@needs_kernel
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 400),
    st.integers(1, 40),
    st.booleans(),
    st.booleans(),
    st.integers(1, 6),
    st.booleans(),
    st.booleans(),
)
def test_the_c_loops_give_the_python_loops_answer_to_the_bit(
    seed, n, workers, ties, tight, levels, any_perm, fcfs
):
    arr, svc, rank, free0, wait_limit, limit = _case(seed, n, workers, ties, tight, levels, any_perm)
    lists = (arr.tolist(), svc.tolist())
    for flow in (None, FreeFlow(arr, arr + svc, limit)):
        free_py, free_c = list(free0), list(free0)
        if fcfs:
            want = serve_fcfs(*lists, free_py, wait_limit.tolist(), limit.tolist(), flow)
            got = serve_native.serve_fcfs(KERNEL, arr, svc, free_c, wait_limit, limit)
        else:
            want = serve_priority(*lists, rank.tolist(), free_py, wait_limit.tolist(), limit.tolist(), flow)
            got = serve_native.serve_priority(KERNEL, arr, svc, rank, free_c, wait_limit, limit)
        assert _bits(got) == _bits(want)
        if flow is None:  # the same heap, layout included: it stopped at the same request
            assert _bits(free_c) == _bits(free_py)
        else:  # the bulk path lays the heap out its own way; the times are the same
            assert _bits(sorted(free_c)) == _bits(sorted(free_py))


@needs_kernel
def test_a_failure_stops_both_at_the_same_request():
    """Request 2 must not wait but finds both workers busy: both loops fail there, having
    served requests 0 and 1 (the heap shows it); a finish limit fails the same way."""
    arr = np.array([0.0, 0.0, 1.0, 5.0])
    svc = np.array([3.0, 3.0, 1.0, 1.0])
    wait_limit = np.array([np.inf, np.inf, 1.0, np.inf])
    limit = np.full(4, 1e9)
    for fcfs in (True, False):
        for wl_, lim in ((wait_limit, limit), (np.full(4, np.inf), np.array([9.0, 9.0, 3.5, 9.0]))):
            free_py, free_c = [-np.inf, -np.inf], [-np.inf, -np.inf]
            if fcfs:
                want = serve_fcfs(arr.tolist(), svc.tolist(), free_py, wl_.tolist(), lim.tolist())
                got = serve_native.serve_fcfs(KERNEL, arr, svc, free_c, wl_, lim)
            else:
                rank = [0, 1, 2, 3]
                want = serve_priority(arr.tolist(), svc.tolist(), rank, free_py, wl_.tolist(), lim.tolist())
                got = serve_native.serve_priority(KERNEL, arr, svc, rank, free_c, wl_, lim)
            assert want is None and got is None
            assert free_c == free_py == [3.0, 3.0]


@needs_kernel
@pytest.mark.parametrize(
    ("third", "want"),
    [
        (2.0, [0.0, 2.0, 5.0]),  # arrives as the worker frees: not waiting, the waiting one goes
        (1.5, [0.0, 3.0, 2.0]),  # arrives before: both wait, the better ranked goes first
    ],
)
def test_ties_at_the_instant_a_worker_frees(third, want):
    arr, svc, rank = [0.0, 1.0, third], [2.0, 3.0, 1.0], [0, 2, 1]
    inf, lim = [np.inf] * 3, [1e9] * 3
    assert serve_priority(arr, svc, rank, [-np.inf], inf, lim) == want
    assert serve_native.serve_priority(KERNEL, arr, svc, rank, [-np.inf], inf, lim) == want
    want_fcfs = serve_fcfs(arr, svc, [-np.inf], inf, lim)
    assert serve_native.serve_fcfs(KERNEL, arr, svc, [-np.inf], inf, lim) == want_fcfs


@needs_kernel
def test_bad_arguments_are_refused_not_read_out_of_bounds():
    a = np.zeros(3)
    free = np.zeros(2)
    start = np.empty(3)
    with pytest.raises(TypeError):
        KERNEL.fcfs(a.astype(np.float32), a, free, a, a, start)
    with pytest.raises(ValueError):
        KERNEL.fcfs(a, np.zeros(2), free, a, a, start)
    with pytest.raises(IndexError):
        KERNEL.fcfs(a, a, np.zeros(0), a, a, start)
    with pytest.raises(ValueError):
        KERNEL.priority(a, a, np.array([0, 1, 3]), np.array([0, 1, 2]), free, a, a, start)
    with pytest.raises((BufferError, ValueError)):
        KERNEL.fcfs(a, a, np.zeros(4)[::2], a, a, start)  # not contiguous
    assert KERNEL.fcfs(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.empty(0))


@needs_kernel
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 300), st.integers(1, 8), st.integers(0, 50))
def test_prefix_counts_count_as_written(seed, n, levels, queries):
    """``prefix_counts`` (no_wait_bound's counts): out[q] = #{j < prefix[q] : level[j] <= upto[q]}."""
    rng = np.random.default_rng(seed)
    level = rng.integers(0, levels, n)
    prefix = rng.integers(0, n + 1, queries)
    upto = rng.integers(0, levels, queries)
    out = np.full(queries, -1, dtype=np.int64)
    KERNEL.prefix_counts(level, levels, prefix, upto, out)
    want = [int(np.sum(level[:p] <= u)) for p, u in zip(prefix, upto, strict=True)]
    assert out.tolist() == want


@needs_kernel
def test_prefix_counts_refuse_indices_out_of_range():
    level, out = np.array([0, 1, 2]), np.empty(1, dtype=np.int64)
    with pytest.raises(ValueError):
        KERNEL.prefix_counts(level, 2, np.array([1]), np.array([0]), out)  # a level >= nlevels
    with pytest.raises(ValueError):
        KERNEL.prefix_counts(level, 3, np.array([4]), np.array([0]), out)  # prefix > n
    with pytest.raises(ValueError):
        KERNEL.prefix_counts(level, 3, np.array([1]), np.array([3]), out)


# ---- through the simulator and the search --------------------------------------------------------


@st.composite
def two_stage(draw):
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    arrival = np.sort(np.round(rng.uniform(0, 40, n), 0))
    service = np.round(rng.exponential(3, (n, 2)), 1)
    service[:, 1] += 0.1
    batches = rng.integers(0, 3, n)
    first = rng.integers(0, 2, n)
    running = rng.random(n) < 0.2
    service[first == 1, 0] = 0.0
    return arrival, service, batches, first, running


@needs_kernel
@settings(max_examples=120, deadline=None)
@given(
    two_stage(),
    st.integers(1, 30),
    st.integers(1, 20),
    st.sampled_from([QueuePolicy.FCFS, QueuePolicy.EBF]),
    st.booleans(),
    st.sampled_from(["enqueue", "start"]),
    st.sampled_from([None, 0.0, 2.0]),
    st.floats(0, 30),
)
def test_simulator_runs_are_identical_with_either_loops(case, n0, n1, policy, aware, check, allowance, slack):
    arrival, service, batches, first, running = case
    wl = workload(TWO, arrival, service, batch=batches, first_stage=first, running=running)
    dl = wl.batch_T + slack
    answers = []
    for native in (KERNEL, None):
        sim = Simulator(wl, dl, policy, aware, check, None, allowance)
        sim.native = native
        r = sim.run([n0, n1])
        bound = [sim.no_wait_bound(k, [n0, n1]) for k in range(2)]
        answers.append(
            (r.satisfied, r.reason, r.stage, r.completion.tobytes(), r.batch_finish.tobytes(), bound)
        )
    assert answers[0] == answers[1]


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(two_stage(), st.sampled_from([QueuePolicy.FCFS, QueuePolicy.EBF]), st.sampled_from([None, 2.0]))
def test_search_decides_the_same_with_either_loops(case, policy, allowance):
    arrival, service, batches, first, running = case
    wl = workload(TWO, arrival, service, batch=batches, first_stage=first, running=running)
    out = []
    for kernel in (KERNEL, None):
        saved = serve_native.KERNEL
        serve_native.KERNEL = kernel
        try:
            r = search(wl, TWO, 2.0, policy=policy, max_replicas=64, request_allowance_s=allowance)
        finally:
            serve_native.KERNEL = saved
        out.append((r.replicas, r.satisfiable, r.simulations))
    assert out[0] == out[1]


@needs_kernel
def test_planner_decisions_are_the_same_with_either_loops(monkeypatch):
    """The planner's first decision and its re-plan over 6 batches of 2048 requests (the
    ``bench planner-runtime`` setting): same workers, same probes."""
    from dataclasses import replace

    from distrs.scaling.context import ActiveBatch, PlanContext
    from distrs.scaling.policies import plan
    from distrs.sim.experiments import _profiles
    from distrs.sim.generator import GeneratorParams, generate

    k = 6
    trace = generate(GeneratorParams(tasks=1, iterations=k, batch=2048, seed=11))
    profiles = _profiles(trace)
    ctx = PlanContext(
        now=1000.0,
        stages=trace.stages,
        batches=[ActiveBatch(f"task-{i}", "next", "cuda", 2048, anchor=1000.0 + i * 30.0) for i in range(k)],
        histories={f"task-{i}": [profiles[i]] for i in range(k)},
        max_extra_delay_s=2.0,
        max_replicas=100_000,
    )
    out = []
    for kernel in (KERNEL, None):
        monkeypatch.setattr(serve_native, "KERNEL", kernel)
        first = plan(ctx)
        opts = replace(
            ctx.options,
            warm_start=dict(first.replicas),
            search_hint=dict(first.debug["search"]),
            scale_down_margin_s=15.0,
        )
        again = plan(replace(ctx, now=ctx.now + 5.0, options=opts))
        out.append((first.replicas, first.debug["simulations"], again.replicas, again.debug["simulations"]))
    assert out[0] == out[1]
