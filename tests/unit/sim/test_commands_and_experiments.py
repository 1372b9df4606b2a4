"""``distrs bench ...`` / ``distrs trace generate`` and the experiment helpers behind them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from distrs.commands.bench import app as bench_app
from distrs.commands.trace import app as trace_app
from distrs.sim.experiments import EbfPoint, gpus_needed, planner_runtime, two_batch_trace
from distrs.sim.generator import GeneratorParams, generate
from distrs.sim.trace import load

runner = CliRunner()


def test_trace_generate_writes_a_loadable_trace(tmp_path):
    out = tmp_path / "g"
    res = runner.invoke(
        trace_app,
        [
            "--out",
            str(out),
            "--tasks",
            "2",
            "--iterations",
            "2",
            "--batch",
            "32",
            "--mode",
            "disaggregated",
            "--param",
            "exec_timeout_s=30",
        ],
    )
    assert res.exit_code == 0, res.output
    tr = load(out)
    assert tr.n == 128 and tr.mode == "disaggregated"
    assert tr.stages[1].timeout_s == 30.0
    meta = json.loads((tmp_path / "g.meta.json").read_text())
    assert meta["generator"]["exec_timeout_s"] == 30.0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--mode", "sideways"], "--mode"),
        (["--param", "nonsense=1"], "--param"),
        (["--param", "batch=x"], "--param"),
    ],
)
def test_trace_generate_rejects_bad_input_naming_the_option(tmp_path, args, field):
    res = runner.invoke(trace_app, ["--out", str(tmp_path / "x"), *args])
    assert res.exit_code != 0
    assert field in res.output


def test_bench_scaling_json_has_exactly_the_documented_shape(tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(
        bench_app,
        [
            "scaling",
            "--trace",
            "demo",
            "--iterations",
            "2",
            "--json",
            str(out),
            "--policies",
            "distrs,zq-dedicated",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert list(data) == ["policies"]
    assert list(data["policies"]) == ["distrs", "zq-dedicated"]
    for entry in data["policies"].values():
        assert set(entry) == {
            "worker_seconds",
            "busy_seconds",
            "extra_delay_s",
            "batches",
            "planner_s",
            "ledger",
            "over_D",
        }
        assert set(entry["ledger"]) == {"compile", "execute"}
        assert set(entry["worker_seconds"]) == {"compile", "execute"}
        assert set(entry["extra_delay_s"]) == {"mean", "p50", "p99", "max"}
        assert set(entry["planner_s"]) == {"mean", "max"}
        assert entry["batches"] == 6
    assert "| distrs |" in res.output


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["scaling", "--trace", "/nonexistent/t"], "--trace"),
        (["scaling", "--trace", "demo", "--policies", "magic"], "--policies"),
        (["ebf", "--trace", "demo", "--gpus", "a,b"], "--gpus"),
    ],
)
def test_bench_rejects_bad_input_naming_the_option(args, field):
    res = runner.invoke(bench_app, args)
    assert res.exit_code != 0
    assert field in res.output


def test_bench_ebf_and_planner_runtime_commands(tmp_path):
    res = runner.invoke(
        bench_app, ["ebf", "--trace", "demo", "--gpus", "2,4,8", "--json", str(tmp_path / "e.json")]
    )
    assert res.exit_code == 0, res.output
    e = json.loads((tmp_path / "e.json").read_text())
    assert [p["gpus"] for p in e["points"]] == [2, 4, 8]
    res = runner.invoke(
        bench_app,
        ["planner-runtime", "--batches", "1,2", "--repeats", "1", "--json", str(tmp_path / "p.json")],
    )
    assert res.exit_code == 0, res.output
    pts = json.loads((tmp_path / "p.json").read_text())["points"]
    assert pts[1]["requests"] > pts[0]["requests"] > 0


def test_two_batch_trace_is_two_batches_gap_apart():
    tr = generate(GeneratorParams(tasks=3, iterations=2, batch=50, seed=1))
    two = two_batch_trace(tr, 100.0, 1)
    assert two.n == 100 and two.task_names == ["first", "second"]
    starts = sorted({float(x) for x in two.rollout_start})
    assert starts == [0.0, 100.0]


def test_gpus_needed_picks_the_first_count_under_the_threshold():
    pts = [EbfPoint(10, 50.0, 90.0), EbfPoint(20, 3.0, 40.0), EbfPoint(30, 0.0, 4.0)]
    assert gpus_needed(pts, 5.0) == {"ebf": 20, "fcfs": 30}
    assert gpus_needed(pts, 0.5) == {"ebf": 30, "fcfs": None}


def test_planner_runtime_grows_with_requests():
    pts = planner_runtime((1, 3), repeats=1)
    assert pts[1].requests > pts[0].requests
    assert all(p.simulations > 0 and p.seconds > 0 for p in pts)
