"""Run the chart's Redis Cluster (redis.mode cluster) as podman containers.

`start_redis_cluster(objs, ...)` takes a rendered release and starts every pod of its Redis
StatefulSet (`<sts>-0` .. `<sts>-N-1`) from the rendered pod template with `podspec.plan_pod`, each
on an address of its own on a podman network the harness creates. The headless Service is mirrored
the way cluster DNS answers it: `--add-host` entries give every pod's name
(`<pod>.<service>.<namespace>.svc`) its address and the Service name the first pod's (a seed).
`run_job()` runs the rendered formation Job's pod the same way and returns its exit status and log;
`run_pod()` runs a command in a rendered Deployment's pod (the proxy's env and security context).

`move()` removes every node container and starts them again on new addresses with their volumes
kept: what a cluster sees when all its pods are rescheduled at once.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import ipaddress
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.pods import podspec
from tests.pods.cluster import Podman, _free_subnet, runtime_default_profile
from tests.unit.helm.chart_render import NAMESPACE


@dataclasses.dataclass
class Node:
    pod: str  # the pod name (<sts>-i)
    name: str  # the podman container
    ip: str


@dataclasses.dataclass
class RedisClusterPods:
    objects: list[dict[str, Any]]
    statefulset: dict[str, Any]
    job: dict[str, Any]
    nodes: list[Node]
    password: str
    _podman: Podman
    _work: Path
    _net: str
    _addresses: list[str]  # unused addresses on the network, for moves
    _cleanup: list[Callable[[], object]]

    # -- what tests ask

    def cli(self, node: Node, *args: str, check: bool = True) -> str:
        """`redis-cli` in a node's container, authenticated, output with CR stripped."""
        r = self._podman(
            "exec", "--env", f"REDISCLI_AUTH={self.password}", node.name, "redis-cli", *args,
            check=check, timeout=60,
        )  # fmt: skip
        return (r.stdout + (r.stderr if r.returncode else "")).replace("\r", "")

    def sh(self, node: Node, script: str) -> str:
        """A shell script in a node's container (REDISCLI_AUTH set): for commands on one connection."""
        r = self._podman(
            "exec", "--env", f"REDISCLI_AUTH={self.password}", node.name, "sh", "-c", script, timeout=60
        )
        return r.stdout.replace("\r", "")

    def info(self, node: Node) -> dict[str, str]:
        return dict(
            line.split(":", 1) for line in self.cli(node, "cluster", "info").splitlines() if ":" in line
        )

    def ready(self, node: Node) -> bool:
        """The rendered readinessProbe (exec), one try, as the kubelet runs it."""
        probe = self.statefulset["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
        r = self._podman("exec", node.name, *probe["exec"]["command"], check=False, timeout=30)
        return r.returncode == 0

    def wait(self, what: Callable[[], bool], timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):
                if what():
                    return
            time.sleep(0.5)
        raise AssertionError(f"{message} within {timeout:.0f} s\n{self.logs_tail()}")

    def logs(self, name: str) -> str:
        r = self._podman("logs", name, check=False)
        return r.stdout + r.stderr

    def logs_tail(self) -> str:
        return "\n".join(f"--- {n.name}\n{self.logs(n.name)[-1500:]}" for n in self.nodes)

    def run_job(self, timeout: float = 300) -> tuple[int, str]:
        """Run the formation Job's pod to completion: (exit status, log)."""
        spec = copy.deepcopy(self.job["spec"]["template"]["spec"])
        pod = f"{self.job['metadata']['name']}-{secrets.token_hex(3)}"
        name = f"{pod}-{self._net[-8:]}"
        plan = podspec.plan_pod(
            pod, spec, None, self._cluster(pod), self._addresses.pop(), container_name=name
        )
        self._materialize(plan)
        self._podman("run", *plan.args)
        self._cleanup.append(lambda: self._podman("rm", "-f", "-t", "1", name, check=False))
        r = self._podman("wait", name, timeout=timeout)
        return int(r.stdout.strip().splitlines()[-1]), self.logs(name)

    def run_pod(
        self, workload: dict[str, Any], image: str, command: list[str], timeout: float = 120
    ) -> tuple[int, str]:
        """Run `command` in a pod of a rendered Deployment (its env, security context, volumes) on
        the cluster's network, to completion: (exit status, log)."""
        spec = copy.deepcopy(workload["spec"]["template"]["spec"])
        spec["containers"][0]["command"], spec["containers"][0]["args"] = command, []
        pod = f"{workload['metadata']['name']}-{secrets.token_hex(3)}"
        name = f"{pod}-{self._net[-8:]}"
        plan = podspec.plan_pod(
            pod, spec, image, self._cluster(pod), self._addresses.pop(), container_name=name
        )
        self._materialize(plan)
        self._podman("run", *plan.args)
        self._cleanup.append(functools.partial(self._podman, "rm", "-f", "-t", "1", name, check=False))
        r = self._podman("wait", name, timeout=timeout)
        return int(r.stdout.strip().splitlines()[-1]), self.logs(name)

    def wipe(self, node: Node) -> None:
        """The node's pod comes back with an empty volume (a lost PVC), on the same address."""
        self._podman("rm", "-f", "-t", "1", node.name)
        shutil.rmtree(self._work / "volumes" / node.pod / "data")
        self._start_nodes([node])

    def kill(self, node: Node) -> None:
        self._podman("kill", node.name)

    def move(self) -> None:
        """Every node container removed and started again on a new address, volumes kept."""
        for n in self.nodes:
            self._podman("rm", "-f", "-t", "2", n.name)
        for n in self.nodes:
            n.ip = self._addresses.pop()
        self._start_nodes()

    def stop(self) -> None:
        while self._cleanup:
            with contextlib.suppress(Exception):
                self._cleanup.pop()()

    # -- how it runs

    def _hosts(self) -> dict[str, str]:
        svc = self.statefulset["spec"]["serviceName"]
        hosts = {f"{n.pod}.{svc}.{NAMESPACE}.svc": n.ip for n in self.nodes}
        for h in (svc, f"{svc}.{NAMESPACE}", f"{svc}.{NAMESPACE}.svc"):
            hosts[h] = self.nodes[0].ip
        return hosts

    def _cluster(self, container: str) -> podspec.Cluster:
        return podspec.Cluster(
            namespace=NAMESPACE,
            secrets={
                o["metadata"]["name"]: podspec.secret_data(o) for o in self.objects if o["kind"] == "Secret"
            },
            configmaps={
                o["metadata"]["name"]: podspec.configmap_data(o)
                for o in self.objects
                if o["kind"] == "ConfigMap"
            },
            runtime_default_seccomp=runtime_default_profile(),
            seccomp_root=self._work / "seccomp",
            volume_root=self._work / "volumes" / container,
            network=self._net,
            hosts=self._hosts(),
        )

    def _materialize(self, plan: podspec.PodPlan) -> None:
        for d in plan.dirs:
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o777)
        for p, data in plan.files.items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            p.chmod(0o644)

    def _start_nodes(self, only: list[Node] | None = None) -> None:
        template = copy.deepcopy(self.statefulset["spec"]["template"]["spec"])
        for vct in self.statefulset["spec"]["volumeClaimTemplates"]:
            template.setdefault("volumes", []).append(
                {"name": vct["metadata"]["name"], "persistentVolumeClaim": {}}
            )
        plans = [
            podspec.plan_pod(n.pod, template, None, self._cluster(n.pod), n.ip, container_name=n.name)
            for n in only or self.nodes
        ]  # the volume root is per pod, so a moved node finds its data again
        for n, plan in zip(only or self.nodes, plans, strict=True):
            self._materialize(plan)
            self._podman("run", *plan.args)
            self._cleanup.append(functools.partial(self._podman, "rm", "-f", "-t", "1", n.name, check=False))


def start_redis_cluster(objs: list[dict[str, Any]], podman_env: dict[str, str]) -> RedisClusterPods:
    """Start the release's Redis Cluster nodes (not yet formed); `stop()` removes everything."""
    sts = next(
        o
        for o in objs
        if o["kind"] == "StatefulSet" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "redis"
    )
    job = next(o for o in objs if o["kind"] == "Job")
    secret = next(
        podspec.secret_data(o)
        for o in objs
        if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-redis")
    )
    podman = Podman(podman_env)
    cleanup: list[Callable[[], object]] = []
    work = Path(tempfile.mkdtemp(prefix="distrs-pods-redis-", dir="/var/tmp"))
    work.chmod(0o755)
    cleanup.append(lambda: shutil.rmtree(work, ignore_errors=True))
    try:
        subnet: ipaddress.IPv4Network = _free_subnet(podman)
        net = f"distrs-pods-{secrets.token_hex(4)}"
        podman("network", "create", "--disable-dns", "--subnet", str(subnet), net)
        cleanup.append(lambda: podman("network", "rm", "-f", net, check=False))
        addresses = [str(ip) for ip in list(subnet.hosts())[9:]]
        addresses.reverse()  # pop() hands out the lowest first
        nodes = []
        for i in range(int(sts["spec"]["replicas"])):
            pod = f"{sts['metadata']['name']}-{i}"
            nodes.append(Node(pod, f"{pod}-{net[-8:]}", addresses.pop()))
        rc = RedisClusterPods(
            objs, sts, job, nodes, secret["redis-password"].decode(), podman, work, net, addresses, cleanup
        )
        rc._start_nodes()
    except BaseException:
        for f in reversed(cleanup):
            with contextlib.suppress(Exception):
                f()
        raise
    return rc
