"""Spec parsing: shipped examples load, bad input names the field, Kubernetes nodes map to a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

import distrs.placement
from distrs.placement.specs import (
    GpuType,
    LinkSpec,
    NetworkProfile,
    SpecError,
    cluster_from_k8s_nodes,
    load_cluster,
    load_workflow,
    parse_cluster,
    parse_workflow,
)

EXAMPLES = Path(distrs.placement.__file__).parent / "examples"
CLUSTERS = sorted(p for p in EXAMPLES.glob("*.yaml") if "gpu_types" in p.read_text())
WORKFLOWS = sorted(p for p in EXAMPLES.glob("*.yaml") if "algorithm:" in p.read_text())


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.stem)
def test_example_clusters_load(path):
    c = load_cluster(path)
    assert c.num_gpus > 0
    assert all(n.gpu in c.gpu_types for n in c.nodes)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_example_workflows_load(path):
    wf = load_workflow(path)
    assert wf.samples == wf.global_batch * wf.responses_per_prompt


def test_hetrl_testbed_matches_table1():
    for name in (
        "hetrl-single-region",
        "hetrl-multi-region-hybrid",
        "hetrl-multi-country",
        "hetrl-multi-continent",
    ):
        c = load_cluster(EXAMPLES / f"{name}.yaml")
        counts: dict[str, int] = {}
        for n in c.nodes:
            counts[n.gpu] = counts.get(n.gpu, 0) + n.count
        assert counts == {"A100": 24, "L40S": 24, "L4": 16}
        assert (c.gpu_types["A100"].tflops, c.gpu_types["A100"].memory_gb, c.gpu_types["A100"].hbm_gbps) == (
            312,
            40,
            2039,
        )
    hybrid = load_cluster(EXAMPLES / "hetrl-multi-region-hybrid.yaml")
    assert hybrid.network.between("ohio", "virginia") == LinkSpec(10, 5.0)
    assert hybrid.network.between("virginia-edge", "virginia").bandwidth_gbps == 1.0
    for name, lat, bw in (
        ("hetrl-multi-country", (5, 30), (1.9, 5.0)),
        ("hetrl-multi-continent", (5, 60), (0.9, 5.0)),
    ):
        links = load_cluster(EXAMPLES / f"{name}.yaml").network.links
        assert len({link.a for link in links} | {link.b for link in links}) == 8
        assert min(x.latency_ms for x in links) >= lat[0] and max(x.latency_ms for x in links) <= lat[1]
        assert min(x.bandwidth_gbps for x in links) >= bw[0] and max(x.bandwidth_gbps for x in links) <= bw[1]


BASE = {
    "gpu_types": {"g": {"tflops": 1, "memory_gb": 1, "hbm_gbps": 1, "intra_gbps": 1, "price_per_hour": 1}},
    "nodes": [{"name": "n", "gpu": "g", "count": 1, "region": "r"}],
    "network": {"default": {"latency_ms": 1, "bandwidth_gbps": 1}},
}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"nodes": []}, "nodes"),
        ({"nodes": [{"name": "n", "gpu": "h", "count": 1, "region": "r"}]}, "nodes[0].gpu"),
        ({"nodes": [{"name": "n", "gpu": "g", "count": 0, "region": "r"}]}, "nodes[0].count"),
        ({"nodes": [{"name": "n", "gpu": "g", "count": 1.5, "region": "r"}]}, "nodes[0].count"),
        ({"gpu_types": {"g": {"tflops": "fast"}}}, "gpu_types.g.tflops"),
        ({"network": {"default": {"latency_ms": 1}}}, "network.default.bandwidth_gbps"),
    ],
)
def test_bad_cluster_names_the_field(patch, field):
    with pytest.raises(SpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_cluster({**BASE, **patch})


WF = {
    "algorithm": "ppo",
    "mode": "sync",
    "models": {
        "actor": {"layers": 2, "hidden": 4, "intermediate": 8},
        "critic": {"layers": 2, "hidden": 4, "intermediate": 8},
    },
    "seq_in": 1,
    "seq_out": 1,
    "global_batch": 1,
    "responses_per_prompt": 1,
}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"algorithm": "dpo"}, "algorithm"),
        ({"mode": "later"}, "mode"),
        ({"models": {"critic": {"layers": 2, "hidden": 4, "intermediate": 8}}}, "models.actor"),
        ({"models": {"actor": {"layers": 2, "hidden": 4, "intermediate": 8}}}, "models.critic"),
        ({"algorithm": "grpo"}, "models.critic"),
        ({"seq_in": -1}, "seq_in"),
    ],
)
def test_bad_workflow_names_the_field(patch, field):
    with pytest.raises(SpecError, match=field):
        parse_workflow({**WF, **patch})


def test_reference_model_defaults_to_actor():
    wf = parse_workflow(WF)
    assert wf.model("ref") == wf.model("actor")


def test_cluster_from_kubernetes_nodes():
    catalogue = {"A100": GpuType("A100", 312, 40, 2039, 600, 4.1, "NVIDIA-A100-SXM4-40GB")}
    nodes = [
        {
            "metadata": {
                "name": "gpu-1",
                "labels": {
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                    "topology.kubernetes.io/zone": "us-east-1a",
                    "topology.kubernetes.io/region": "us-east-1",
                },
            },
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        },
        {"metadata": {"name": "cpu-1", "labels": {}}, "status": {"allocatable": {"cpu": "16"}}},
        {
            "metadata": {
                "name": "gpu-2",
                "labels": {
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                    "nvidia.com/gpu.count": "4",
                    "topology.kubernetes.io/zone": "us-east-1b",
                },
            }
        },
    ]
    c = cluster_from_k8s_nodes(nodes, catalogue, NetworkProfile(LinkSpec(0.1, 100)))
    assert [(n.name, n.gpu, n.count, n.region, n.zone) for n in c.nodes] == [
        ("gpu-1", "A100", 8, "us-east-1", "us-east-1a"),
        ("gpu-2", "A100", 4, "us-east-1b", "us-east-1b"),
    ]
    with pytest.raises(SpecError, match="unknown product"):
        cluster_from_k8s_nodes(
            [{"metadata": {"labels": {"nvidia.com/gpu.product": "X"}}}],
            catalogue,
            NetworkProfile(LinkSpec(0.1, 100)),
        )
