"""The chart's Redis Cluster (redis.mode cluster), run from the rendered manifests under podman.

Six nodes start from the rendered StatefulSet's pod template (start script, probes, AOF, the
announced pod DNS names, the password Secret, the pod's securityContext), the rendered formation
Job's pod forms the cluster, and the cluster then behaves as the chart promises: every node
reports cluster_state:ok, 3 primaries each with a replica, clients (redis-cli, and redis-py's
cluster client in the proxy's pod with the env the chart gives it) are sent to the pods' DNS
names, a second run of the Job changes nothing, a node whose volume was lost is refused by name,
a killed primary's replica takes over, and a cluster whose pods all came back on new addresses
finds itself again.

The DistRS processes are not started on the cluster here: the store's own cluster tests cover
them; what this module proves is that the chart's Redis objects make a working cluster.
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
def images(pod_tool: build_images.Tool) -> dict[str, str]:
    """The Redis image and the service image (the proxy's pod runs the cluster client)."""
    images = build_images.build(("redis",), tool=pod_tool)
    r = pod_tool.run("run", "--rm", "--network", "none", images["redis"], "true", check=False, capture=True)
    if r.returncode != 0:
        need("pod runtime", "the pod-runtime tier starts containers", found=False, detail=r.stderr[-800:])
    images.update(build_images.build(("service",), tool=pod_tool))
    return images


@pytest.fixture
def redis_cluster(pod_tool: build_images.Tool, images: dict[str, str]) -> Iterator[RedisClusterPods]:
    repo, tag = images["redis"].rsplit(":", 1)
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


# Run in the proxy's pod: what its DISTRS_REDIS_URL and DISTRS_REDIS_MODE give redis-py's cluster client.
CLIENT = """
import os
from redis.cluster import RedisCluster
assert os.environ["DISTRS_REDIS_MODE"] == "cluster"
c = RedisCluster.from_url(os.environ["DISTRS_REDIS_URL"])
keys = [f"{{t:tenant/task-{i}}}:batch" for i in range(40)]
for i, k in enumerate(keys):
    c.set(k, i)
assert [int(c.get(k)) for k in keys] == list(range(40))
print("SERVED-BY", " ".join(sorted({c.get_node_from_key(k).host for k in keys})))
print("NODES", " ".join(sorted(n.host for n in c.get_nodes())))
"""


def test_rendered_job_forms_the_cluster_and_clients_follow_pod_names(
    redis_cluster: RedisClusterPods, images: dict[str, str]
) -> None:
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
    # The proxy's pod, with the env the chart gives it, reaches every primary through the seed and
    # is sent to the nodes' pod DNS names.
    proxy = next(
        o for o in rc.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-proxy")
    )
    status, log = rc.run_pod(proxy, images["service"], ["python", "-c", CLIENT])
    assert status == 0, log
    out = dict(line.split(" ", 1) for line in log.splitlines() if line.startswith(("SERVED-BY", "NODES")))
    pod_names = {f"{n.pod}.{svc}.rewards.svc" for n in rc.nodes}
    assert set(out["NODES"].split()) == pod_names, log
    served = set(out["SERVED-BY"].split())
    assert (
        len(served) == 3 and served <= pod_names and all(roles[h.split(".")[0]] == "master" for h in served)
    )
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


def test_job_refuses_to_join_an_empty_node_to_a_formed_cluster(redis_cluster: RedisClusterPods) -> None:
    """A pod back with an empty volume is not silently made part of a cluster that holds data."""
    rc = redis_cluster
    _formed(rc)
    roles = _roles(rc)
    lost = next(n for n in rc.nodes if roles[n.pod] == "slave")
    rc.wipe(lost)
    rc.wait(functools.partial(rc.ready, lost), 60, f"{lost.pod} not answering after its volume was lost")
    assert rc.info(lost)["cluster_known_nodes"] == "1"
    status, log = rc.run_job()
    assert status != 0, log
    assert f"not in it: {lost.ip}:6379" in log and "redis-cli --cluster add-node" in log, log
    assert rc.info(lost)["cluster_known_nodes"] == "1"  # left alone for the operator
