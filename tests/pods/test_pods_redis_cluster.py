"""The chart's Redis Cluster (redis.mode cluster), run from the rendered manifests under podman.

Six nodes start from the rendered StatefulSet's pod template (start script, probes, AOF, the
announced pod DNS names, the password Secret, the pod's securityContext), the rendered formation
Job's pod forms the cluster, and the cluster then behaves as the chart promises: every node
reports cluster_state:ok, 3 primaries each with a replica, clients are sent to the pods' DNS
names, a second run of the Job changes nothing, a killed primary's replica takes over, and a
cluster whose pods all came back on new addresses finds itself again.

The DistRS processes are not started here: the store's own cluster tests cover them; what this
tier proves is that the chart's Redis objects make a working cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from scripts import build_images
from tests.pods.cluster import deep_merge
from tests.pods.redis_cluster import Node, RedisClusterPods, start_redis_cluster
from tests.requirements import need
from tests.unit.helm.chart_render import render

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]

VALUES: dict[str, Any] = {
    "redis": {"mode": "cluster", "cluster": {"nodeTimeoutMs": 2000}},
}


@pytest.fixture(scope="module")
def redis_image(pod_tool: build_images.Tool) -> str:
    """Only the Redis image: this module runs no DistRS process."""
    image = build_images.build(("redis",), tool=pod_tool)["redis"]
    r = pod_tool.run("run", "--rm", "--network", "none", image, "true", check=False, capture=True)
    if r.returncode != 0:
        need("pod runtime", "the pod-runtime tier starts containers", found=False, detail=r.stderr[-800:])
    return image


@pytest.fixture
def redis_cluster(pod_tool: build_images.Tool, redis_image: str) -> Iterator[RedisClusterPods]:
    repo, tag = redis_image.rsplit(":", 1)
    objs = render(deep_merge(VALUES, {"redis": {"image": {"repository": repo, "tag": tag}}}))
    rc = start_redis_cluster(objs, pod_tool.env)
    try:
        yield rc
    finally:
        rc.stop()


def _formed(rc: RedisClusterPods) -> None:
    for n in rc.nodes:
        rc.wait(functools.partial(rc.ready, n), 120, f"{n.pod} not ready before the cluster is formed")
    status, log = rc.run_job()
    assert status == 0, log
    assert "forming a cluster of 6 nodes, 1 replica(s) per primary" in log, log


def _roles(rc: RedisClusterPods) -> dict[str, str]:
    """pod -> master | slave, as the first reachable node sees the cluster."""
    out: dict[str, str] = {}
    for n in rc.nodes:
        try:
            lines = rc.cli(n, "cluster", "nodes").splitlines()
        except RuntimeError:
            continue
        for line in lines:
            fields = line.split()
            host = fields[1].split(",")[1].split(".")[0]
            out[host] = "master" if "master" in fields[2] else "slave"
        return out
    raise AssertionError("no node answers")


def test_rendered_job_forms_the_cluster_and_clients_follow_pod_names(redis_cluster: RedisClusterPods) -> None:
    rc = redis_cluster
    assert len(rc.nodes) == 6
    _formed(rc)
    for n in rc.nodes:
        info = rc.info(n)
        assert info["cluster_state"] == "ok" and info["cluster_known_nodes"] == "6", (n.pod, info)
        assert rc.cli(n, "config", "get", "appendonly").split() == ["appendonly", "yes"]
        rc.wait(functools.partial(rc.ready, n), 60, f"{n.pod} not ready once formed")
    roles = _roles(rc)
    assert sorted(roles.values()) == ["master"] * 3 + ["slave"] * 3, roles
    # Slots point clients at the announced pod DNS names, not at the addresses of the moment.
    svc = rc.statefulset["spec"]["serviceName"]
    slots = rc.cli(rc.nodes[0], "cluster", "slots")
    assert f".{svc}." in slots, slots
    # A client seeded with the Service name follows MOVED to those names: keys of every slot range.
    seed = f"{svc}.rewards.svc"
    for i in range(30):
        assert rc.cli(rc.nodes[0], "-c", "-h", seed, "set", f"k{i}", str(i)).strip() == "OK"
    assert rc.cli(rc.nodes[3], "-c", "-h", seed, "get", "k29").strip() == "29"
    # every primary got some of them, and its replica too
    rc.wait(lambda: all(int(rc.cli(n, "dbsize").strip()) > 0 for n in rc.nodes), 30, "a node holds no key")
    # Upgrades run the Job again: on a formed cluster it changes nothing.
    status, log = rc.run_job()
    assert status == 0 and "already formed; nothing to do" in log, log
    assert _roles(rc) == roles


def test_killed_primary_is_replaced_by_its_replica(redis_cluster: RedisClusterPods) -> None:
    rc = redis_cluster
    _formed(rc)
    roles = _roles(rc)
    victim = next(n for n in rc.nodes if roles[n.pod] == "master")
    # a key of the victim's slots, written and acknowledged by its replica on one connection
    key = next(f"k{i}" for i in range(200) if rc.cli(victim, "set", f"k{i}", "probe").strip() == "OK")
    acked = rc.sh(victim, f"printf 'SET {key} kept\\nWAIT 1 5000\\n' | redis-cli").split()
    assert acked == ["OK", "1"], acked
    rc.kill(victim)
    others = [n for n in rc.nodes if n is not victim]
    rc.wait(
        lambda: (
            all(rc.info(n).get("cluster_state") == "ok" for n in others)
            and sorted(_roles_of(rc, others).values()).count("master") == 3
        ),
        60,
        "no replica took over the killed primary",
    )
    # the Service name's first address is a dead pod's here: seed from a live node instead
    assert rc.cli(others[0], "-c", "get", key).strip() == "kept"


def _roles_of(rc: RedisClusterPods, nodes: list[Node]) -> dict[str, str]:
    out = {}
    for n in nodes:
        first = rc.cli(n, "role").splitlines()[0].strip()
        out[n.pod] = first
    return out


def test_cluster_finds_itself_when_every_pod_moved(redis_cluster: RedisClusterPods) -> None:
    rc = redis_cluster
    _formed(rc)
    rc.cli(rc.nodes[0], "-c", "-h", rc.nodes[0].ip, "set", "{moved}", "still-here")
    for n in rc.nodes:  # replicas caught up before the move
        rc.wait(functools.partial(rc.ready, n), 60, f"{n.pod} not ready before the move")
    old = {n.pod: n.ip for n in rc.nodes}
    rc.move()
    assert all(n.ip != old[n.pod] for n in rc.nodes)
    for n in rc.nodes:
        rc.wait(
            functools.partial(_ok_and_ready, rc, n),
            120,
            f"{n.pod} not back in an ok cluster after every pod moved",
        )
    seed = f"{rc.statefulset['spec']['serviceName']}.rewards.svc"
    assert rc.cli(rc.nodes[5], "-c", "-h", seed, "get", "{moved}").strip() == "still-here"


def _ok_and_ready(rc: RedisClusterPods, n: Node) -> bool:
    return rc.info(n).get("cluster_state") == "ok" and rc.ready(n)
