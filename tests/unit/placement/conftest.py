"""Tiny clusters and workflows whose cost-model values can be worked out by hand."""

from __future__ import annotations

import pytest

from distrs.placement.specs import parse_cluster, parse_workflow


def tiny_cluster(nodes: list[dict], links: list[dict] | None = None) -> object:
    return parse_cluster(
        {
            "gpu_types": {
                "fast": {
                    "tflops": 100,
                    "memory_gb": 80,
                    "hbm_gbps": 1000,
                    "intra_gbps": 100,
                    "price_per_hour": 2.0,
                },
                "slow": {
                    "tflops": 50,
                    "memory_gb": 80,
                    "hbm_gbps": 500,
                    "intra_gbps": 100,
                    "price_per_hour": 1.0,
                },
            },
            "nodes": nodes,
            "network": {"default": {"latency_ms": 1.0, "bandwidth_gbps": 80}, "links": links or []},
        }
    )


@pytest.fixture
def two_node_cluster():
    """Node n0 (2 fast GPUs, region a) and node n1 (2 slow GPUs, region b), 10 ms / 8 Gbit/s apart."""
    return tiny_cluster(
        [
            {"name": "n0", "gpu": "fast", "count": 2, "region": "a"},
            {"name": "n1", "gpu": "slow", "count": 2, "region": "b"},
        ],
        [{"a": "a", "b": "b", "latency_ms": 10.0, "bandwidth_gbps": 8.0}],
    )


@pytest.fixture
def tiny_grpo():
    """2 layers, hidden 4, intermediate 8; 2 prompts x 2 responses of 2+2 tokens."""
    return parse_workflow(
        {
            "algorithm": "grpo",
            "mode": "sync",
            "models": {"actor": {"layers": 2, "hidden": 4, "intermediate": 8}},
            "seq_in": 2,
            "seq_out": 2,
            "global_batch": 2,
            "responses_per_prompt": 2,
        }
    )


def small_grpo(mode: str = "sync"):
    """An 8-layer GRPO actor (hidden 1024) with 16 prompts x 4 responses of 512+512 tokens."""
    return parse_workflow(
        {
            "algorithm": "grpo",
            "mode": mode,
            "models": {"actor": {"layers": 8, "hidden": 1024, "intermediate": 4096}},
            "seq_in": 512,
            "seq_out": 512,
            "global_batch": 16,
            "responses_per_prompt": 4,
            "name": "tiny",
        }
    )
