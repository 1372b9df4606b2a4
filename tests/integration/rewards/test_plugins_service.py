"""Reward plugins served end to end: installed (entry point) and declared in the pipelines YAML."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.service import Service, running_service
from tests.integration.rewards.plugin_fixtures import EXAMPLE, install


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = install(tmp_path_factory.mktemp("plugins"))
    path = os.pathsep.join([str(root), str(EXAMPLE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    pipelines = {
        "reward_types": {"boom": {"plugin": "bad_plugins:boom"}, "shout": {"plugin": "bad_plugins:shout"}}
    }
    with running_service(workers={"verify": 1}, pipelines=pipelines, env={"PYTHONPATH": path}) as s:
        yield s


def test_plugins_score_and_a_failing_one_fails_only_its_request(svc: Service) -> None:
    with svc.client() as c:
        assert c.post("/v1/batches", json={"task": "plug", "batch_id": "b1", "size": 4}).status_code == 201
        reqs = [
            ("keywords", {"completion": "Paris, France", "keywords": ["paris", "france"]}),
            ("boom", {"completion": "x"}),
            ("shout", {"completion": "hi"}),
            ("exact_match", {"completion": "no", "ground_truth": "yes"}),
        ]
        body = {
            "requests": [
                {"task": "plug", "batch_id": "b1", "request_id": f"r{i}", "reward_type": rt, "payload": p}
                for i, (rt, p) in enumerate(reqs)
            ]
        }
        assert c.post("/v1/requests", json=body).status_code == 202
        page = c.get("/v1/batches/plug/b1/results", params={"wait_s": 60}).json()
    assert page["complete"]
    by_id = {r["request_id"]: r for r in page["results"]}
    assert (by_id["r0"]["status"], by_id["r0"]["score"]) == ("ok", 1.0)
    assert (
        by_id["r1"]["status"] == "internal_error"
        and "plugin bug" in by_id["r1"]["detail"]["error"]["message"]
    )
    assert by_id["r2"]["detail"]["text"] == "HI"
    assert (by_id["r3"]["status"], by_id["r3"]["score"]) == ("wrong_answer", 0.0)


def test_unknown_reward_type_lists_the_plugins(svc: Service) -> None:
    with svc.client() as c:
        c.post("/v1/batches", json={"task": "plug", "batch_id": "b2", "size": 1})
        r = c.post(
            "/v1/requests",
            json={"task": "plug", "batch_id": "b2", "request_id": "x", "reward_type": "nope", "payload": {}},
        )
        assert r.status_code == 422
        err = r.json()["error"]
        assert err["details"]["field"] == "reward_type"
        assert "keywords" in err["message"] and "boom" in err["message"] and "math" in err["message"]
        types = c.get("/v1/reward-types").json()["reward_types"]
    assert types["exact_match"]["stages"] == ["verify"] and types["shout"]["stages"] == ["verify"]


def test_example_readme_names_the_entry_points() -> None:
    text = (EXAMPLE / "README.md").read_text()
    assert "exact_match" in text and "keywords" in text and Path(EXAMPLE / "pyproject.toml").exists()
