"""``distrs-trace/1`` reading/writing and the calibrated generator."""

from __future__ import annotations

import gzip
import json
from importlib import resources

import numpy as np
import pytest

from distrs.sim.generator import STATUSES, GeneratorParams, generate
from distrs.sim.trace import TraceError, dump, load, paths

SMALL = GeneratorParams(tasks=2, iterations=3, batch=64, seed=5)


def test_round_trip(tmp_path):
    tr = generate(SMALL)
    csv_path, meta_path = dump(tr, tmp_path / "t")
    assert csv_path.name == "t.csv.gz" and meta_path.name == "t.meta.json"
    back = load(tmp_path / "t.csv.gz")
    assert back.n == tr.n == 2 * 3 * 64
    assert back.stage_names == ["compile", "execute"]
    assert back.mode == "colocated"
    np.testing.assert_allclose(np.sort(back.arrival), np.sort(tr.arrival), atol=1e-3)
    meta = json.loads(meta_path.read_text())
    assert meta["format"] == "distrs-trace/1"
    assert (meta["tasks"], meta["iterations"], meta["batch"], meta["requests"]) == (2, 3, 64, 384)
    assert meta["stages"][1] == {"name": "execute", "resource": "gpu", "timeout_s": 60.0, "cost": 8.0}


def test_any_number_of_stages(tmp_path):
    meta = {
        "format": "distrs-trace/1",
        "mode": "disaggregated",
        "stages": [{"name": n, "resource": "cpu", "timeout_s": 10, "cost": 1} for n in ("a", "b", "c")],
    }
    (tmp_path / "x.meta.json").write_text(json.dumps(meta))
    with gzip.open(tmp_path / "x.csv.gz", "wt") as fh:
        fh.write("task,iteration,request,rollout_start,arrival,status,s_a,s_b,s_c\n")
        fh.write("t,0,0,0,1.5,success,1,2,3\n")
    tr = load(tmp_path / "x")
    assert tr.stage_names == ["a", "b", "c"]
    assert tr.s.tolist() == [[1.0, 2.0, 3.0]]


@pytest.mark.parametrize(
    ("meta", "header", "match"),
    [
        ({"format": "other/1", "mode": "colocated", "stages": []}, "", "format"),
        ({"format": "distrs-trace/1", "mode": "weird", "stages": []}, "", "mode"),
        ({"format": "distrs-trace/1", "mode": "colocated", "stages": []}, "", "stages"),
        (
            {"format": "distrs-trace/1", "mode": "colocated", "stages": [{"name": "a", "timeout_s": 1}]},
            "task,iteration,request,rollout_start,arrival,status\n",
            r"missing columns \['s_a'\]",
        ),
    ],
)
def test_bad_traces_name_the_problem(tmp_path, meta, header, match):
    (tmp_path / "x.meta.json").write_text(json.dumps(meta))
    with gzip.open(tmp_path / "x.csv.gz", "wt") as fh:
        fh.write(header)
    with pytest.raises(TraceError, match=match):
        load(tmp_path / "x")


def test_paths_accept_any_spelling(tmp_path):
    for spec in ("a/b", "a/b.csv.gz", "a/b.meta.json"):
        c, m = paths(spec)
        assert (c.name, m.name) == ("b.csv.gz", "b.meta.json")


def test_generator_is_deterministic_and_sorted():
    a, b = generate(SMALL), generate(SMALL)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.s, b.s)
    assert np.all(np.diff(a.arrival) >= 0)
    assert not np.array_equal(
        a.arrival, generate(GeneratorParams(tasks=2, iterations=3, batch=64, seed=6)).arrival
    )


def test_generator_calibration():
    p = GeneratorParams(tasks=1, iterations=30, batch=2048, seed=1)
    tr = generate(p)
    r = tr.arrival - tr.rollout_start
    assert r.min() >= p.first_arrival_s - 1e-6 and r.max() <= p.rollout_max_s + 1e-6
    assert 80 < np.median(r) < 130  # peak early, long tail (Fig. 5)
    st = np.array(STATUSES)[tr.status]
    first, last = tr.iteration == 0, tr.iteration == 29
    assert (st[first] == "gen_failed").mean() > (st[last] == "gen_failed").mean() + 0.2  # learns (Fig. 6b)
    assert (st[last] == "success").mean() > (st[first] == "success").mean() + 0.3
    assert (tr.s[st == "compile_timeout", 0] == 120.0).all() and (tr.s[st == "exec_timeout", 1] == 60.0).all()
    assert (tr.s[st == "gen_failed"] == 0).all()
    comp = tr.s[:, 0][tr.s[:, 0] > 0]
    assert 40 < np.median(comp) < 70  # ~50 s typical compile (Sec. 3.1)
    # colocated: the next rollout starts ~training_s after the batch's last reward
    t0 = (tr.arrival + tr.s.sum(1))[first].max()
    nxt = tr.rollout_start[tr.iteration == 1][0]
    assert 250 < nxt - t0 < 350


def test_disaggregated_rollouts_run_back_to_back():
    co = generate(GeneratorParams(tasks=1, iterations=5, batch=256, seed=2))
    dis = generate(GeneratorParams(tasks=1, iterations=5, batch=256, seed=2, mode="disaggregated"))
    span = dis.rollout_start.max() - dis.rollout_start.min()
    assert span < co.rollout_start.max() - co.rollout_start.min()


def test_packaged_demo_trace_loads_and_is_small():
    data = resources.files("distrs.sim").joinpath("data")
    with resources.as_file(data.joinpath("demo.csv.gz")) as p:
        assert p.stat().st_size < 200_000
        tr = load(p)
    assert tr.n >= 500 and len(tr.task_names) >= 2 and tr.stage_names == ["compile", "execute"]
