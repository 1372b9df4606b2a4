"""`distrs placement plan|render` end to end on a shipped example, manifests schema-checked."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

import distrs.placement
from distrs.commands.placement import app
from distrs.placement.manifests import pod_templates

EXAMPLES = Path(distrs.placement.__file__).parent / "examples"
K8S_VERSION = "1.30.0"


@pytest.mark.parametrize(
    ("cluster", "workflow", "algorithm"),
    [
        ("small-16gpu-two-regions.yaml", "qwen3-4b-ppo-sync.yaml", "hetrl"),
        ("areal-hex-h800-h20.yaml", "areal-r1-distill-7b-grpo-async.yaml", "areal-hex"),
        ("espresso-juchi.yaml", "espresso-qwen3-4b-grpo-slo.yaml", "espresso"),
    ],
)
def test_plan_render_validate(tmp_path, cluster, workflow, algorithm):
    runner = CliRunner()
    plan = tmp_path / "plan.json"
    png = tmp_path / "plan.png"
    res = runner.invoke(
        app,
        [
            "plan",
            "--cluster",
            str(EXAMPLES / cluster),
            "--workflow",
            str(EXAMPLES / workflow),
            "--algorithm",
            algorithm,
            "--budget-s",
            "3",
            "--json",
            str(plan),
            "--png",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "iteration" in res.output and "DP=" in res.output
    doc = json.loads(plan.read_text())
    assert doc["algorithm"] == algorithm and doc["iteration_time_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "job.yaml"
    res = runner.invoke(
        app,
        [
            "render",
            str(plan),
            "--reward-url",
            "http://distrs:8000",
            "--cluster",
            str(EXAMPLES / cluster),
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    manifests = list(yaml.safe_load_all(out.read_text()))
    assert [m["kind"] for m in manifests] == ["ConfigMap", "RayJob"]
    for obj in [manifests[0], *pod_templates(manifests)]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_plan_reports_bad_spec(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu_types: {}\n")
    res = CliRunner().invoke(
        app, ["plan", "--cluster", str(bad), "--workflow", str(EXAMPLES / "qwen3-8b-ppo-sync.yaml")]
    )
    assert res.exit_code == 2
    assert "gpu_types" in res.output
