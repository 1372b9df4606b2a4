"""Pipeline table loading, history estimates, batch accounting and queue ordering."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from distrs.core.accounting import finish_batch
from distrs.core.history import BatchProfile, RequestProfile, estimate_completion
from distrs.core.languages import generic_languages
from distrs.core.model import BatchInfo, RequestRecord, Result, StageRecord, Status
from distrs.core.pipeline_config import load_pipelines, table_from_mapping
from distrs.core.priority import QueuePolicy, sort_key
from distrs.core.stages import ResourceClass


def test_defaults_have_the_documented_pipelines() -> None:
    t = load_pipelines()
    languages = {name: ["run"] for name in generic_languages()}  # languages.yaml: one run stage each
    assert {k: list(v.stages) for k, v in t.reward_types.items()} == {
        **languages,
        "cuda": ["compile", "execute"],
        "kernelbench": ["compile", "execute"],
        "cpp": ["compile", "run"],
        "python": ["run"],
        "math": ["verify"],
        "synthetic": ["compile", "execute"],
    }
    assert t.stages["execute"].resource is ResourceClass.GPU and t.stages["execute"].cost == 8
    assert t.timeouts_from("cuda", "compile") == 660.0 and t.next_stage("cuda", "execute") is None
    # kernelbench bounds its own compiles (its descriptor): 600 s whatever the shared stage says
    assert t.timeout_s("kernelbench", "compile") == 600.0 and t.timeout_s("cpp", "compile") == 600.0


def test_a_file_overrides_fields_of_a_descriptor_and_keeps_the_rest(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "stages:\n  compile: {timeout_s: 120}\n"
        "reward_types:\n  kernelbench: {timeouts: {compile: 900}}\n  synthetic: [execute]\n"
    )
    t = load_pipelines(f)
    kb = t.reward_types["kernelbench"]
    assert t.timeout_s("kernelbench", "compile") == 900 and t.timeout_s("cuda", "compile") == 120
    assert t.timeouts_from("kernelbench", "compile") == 960 and t.timeouts_from("cpp", "compile") == 180
    assert kb.extra is not None and set(kb.handlers) == {"compile", "execute"}  # the rest is kept
    syn = t.reward_types["synthetic"]
    assert syn.stages == ("execute",) and syn.route is not None and syn.handlers
    # a type's own timeouts follow its stages: a file that drops the stage drops the timeout
    f.write_text("reward_types:\n  kernelbench: [execute]\n")
    assert dict(load_pipelines(f).reward_types["kernelbench"].timeouts) == {}


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"timeouts": {"compile": 0}}, "must be > 0"),
        ({"timeouts": {"run": 5}}, "not one of its stages"),
        ({"timeouts": {"compile": 5}, "colour": 1}, "colour"),
    ],
)
def test_bad_descriptor_overrides_name_the_problem(entry: dict[str, object], needle: str) -> None:
    with pytest.raises((ValidationError, ValueError), match=needle):
        load_pipelines_with({"reward_types": {"kernelbench": entry}})


def load_pipelines_with(data: dict[str, object]) -> object:
    stages = {name: {} for name in ("compile", "execute", "run", "verify")}
    return table_from_mapping({"stages": stages, **data})


def test_file_overrides_merge_over_defaults(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "stages:\n  compile: {timeout_s: 10}\n  lint: {cost: 0.5}\nreward_types:\n  rust: [lint, run]\n"
    )
    t = load_pipelines(f)
    assert t.stages["compile"].timeout_s == 10 and t.stages["lint"].cost == 0.5
    # a stage's other fields keep their defaults
    assert t.stages["compile"].resources.cpu == "4" and t.stages["compile"].resource is ResourceClass.CPU
    assert list(t.reward_types["rust"].stages) == ["lint", "run"] and "cuda" in t.reward_types


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"stages": {"x": {"timeout_s": -1}}}, "timeout_s"),
        ({"stages": {"x": {"colour": "red"}}}, "colour"),
        ({"reward_types": {"y": ["nowhere"]}}, "nowhere"),
        ({"reward_types": {"y": []}}, "no stages"),
    ],
)
def test_bad_files_name_the_problem(data: dict[str, object], needle: str) -> None:
    with pytest.raises((ValidationError, ValueError), match=needle):
        table_from_mapping(data)


def test_estimate_completion_shifts_latest_profile() -> None:
    prof = BatchProfile("t", "b", 0.0, (RequestProfile(10, {"c": 5, "e": 1}), RequestProfile(50, {"c": 20})))
    assert prof.earliest_completion() == 70.0  # Eq. 1-2: max(10+6, 50+20)
    assert estimate_completion([prof], anchor=1000.0, default_span_s=600) == 1070.0
    assert estimate_completion([], anchor=1000.0, default_span_s=600) == 1600.0


def test_finish_batch_computes_T_and_extra_delay() -> None:
    b = BatchInfo(task="t", batch_id="b", size=2, rollout_started_at=100.0)
    recs = [
        RequestRecord(
            task="t",
            batch_id="b",
            request_id=f"r{i}",
            reward_type="synthetic",
            payload={},
            arrived_at=a,
            stage="compile",
            stage_enqueued_at=a,
            result=Result(request_id=f"r{i}", status=Status.OK),
            stages=[StageRecord(name="compile", run_s=s1), StageRecord(name="execute", run_s=s2)],
        )
        for i, (a, s1, s2) in enumerate([(110.0, 5.0, 1.0), (120.0, 10.0, 2.0)])
    ]
    prof = finish_batch(b, recs, now=135.0)
    assert (
        b.earliest_completion == 132.0 and b.extra_delay_s == pytest.approx(3.0) and b.completed_at == 135.0
    )
    assert [q.r for q in prof.requests] == [10.0, 20.0] and prof.requests[1].s == {
        "compile": 10.0,
        "execute": 2.0,
    }


def test_ebf_orders_by_batch_T_then_arrival_fcfs_by_arrival() -> None:
    a_late = sort_key(QueuePolicy.EBF, 500.0, seq=1)
    b_early = sort_key(QueuePolicy.EBF, 300.0, seq=2)
    b_early2 = sort_key(QueuePolicy.EBF, 300.0, seq=3)
    assert sorted([a_late, b_early2, b_early]) == [b_early, b_early2, a_late]
    assert sorted([sort_key(QueuePolicy.FCFS, 500.0, 1), sort_key(QueuePolicy.FCFS, 300.0, 2)])[0][1] == 1
