"""Plan documents, summary rows and rendered manifests for a tiny cluster."""

from __future__ import annotations

import json

import pytest

from distrs.placement import report
from distrs.placement.manifests import pod_templates, render
from tests.unit.placement.conftest import small_grpo


@pytest.mark.parametrize("algorithm", ["hetrl", "verl-baseline", "streamrl-baseline"])
def test_document_has_the_issue_fields(two_node_cluster, algorithm):
    doc = report.run(two_node_cluster, small_grpo(), algorithm, budget_s=1.0)
    for key in (
        "iteration_time_s",
        "throughput_tokens_s",
        "cost_per_hour",
        "algorithm",
        "search_s",
        "groups",
    ):
        assert key in doc
    assert doc["algorithm"] == algorithm
    tasks = [t for g in doc["groups"] for t in g["tasks"]]
    assert sorted(tasks) == sorted(["actor_gen", "ref_inf", "actor_train"])
    for g in doc["groups"]:
        for par in g["parallel"].values():
            assert par["dp"] * par["pp"] * par["tp"] == len(g["gpus"])
            assert sum(par["layers"]) == 8
    used = {d for g in doc["groups"] for d in g["gpus"]}
    assert doc["cost_per_hour"] == pytest.approx(sum(2.0 if d < 2 else 1.0 for d in used))
    assert doc["throughput_tokens_s"] == pytest.approx(64 * 1024 / doc["iteration_time_s"], rel=1e-5)
    json.dumps(doc)  # serialisable


def test_unknown_algorithm_and_missing_inputs(two_node_cluster):
    with pytest.raises(report.PlanningError, match="--algorithm"):
        report.run(two_node_cluster, small_grpo(), "magic")
    with pytest.raises(report.PlanningError, match="async"):
        report.run(two_node_cluster, small_grpo("sync"), "areal-hex")
    with pytest.raises(report.PlanningError, match="slo_iteration_s"):
        report.run(two_node_cluster, small_grpo(), "espresso")


def test_summary_rows_one_per_task(two_node_cluster):
    doc = report.run(two_node_cluster, small_grpo(), "verl-baseline")
    rows = report.summary_rows(doc)
    assert len(rows) == 3
    assert all(len(r) == len(report.SUMMARY_HEADER) for r in rows)
    assert all(r[3].startswith("DP=") for r in rows)


def test_rendered_rayjob(two_node_cluster):
    doc = report.run(two_node_cluster, small_grpo("async"), "streamrl-baseline")
    manifests = render(doc, two_node_cluster, "http://distrs-proxy.distrs:8000", namespace="rl")
    kinds = [m["kind"] for m in manifests]
    assert kinds == ["ConfigMap", "RayJob"]
    cm, job = manifests
    assert json.loads(cm["data"]["plan.json"])["algorithm"] == "streamrl-baseline"
    spec = job["spec"]
    assert "DISTRS_REWARD_URL" in spec["runtimeEnvYAML"] and "distrs-proxy" in spec["entrypoint"]
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    # StreamRL: generation on one GPU type, training on the other -> one worker group per type
    assert len(workers) == 2
    for w in workers:
        sel = w["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        assert sel in ("fast", "slow")
        res = json.loads(w["rayStartParams"]["resources"])
        assert sum(res.values()) == 2
    ents = spec["entrypoint"]
    tp = next(g for g in doc["groups"] if "actor_train" in g["tasks"])["parallel"]["actor_train"]["tp"]
    assert f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tp}" in ents
    assert len(pod_templates(manifests)) == 3
