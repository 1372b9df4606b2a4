"""Run a rendered DistRS release as podman containers: the pod-runtime test harness.

`start_system(values)` renders the chart with the Helm SDK (tests/unit/helm/chart_render.py),
then starts Redis (the chart's StatefulSet, image overridden to a local Debian redis-server
image), the proxy, the planner and one worker per enabled stage, each as a container made from
its rendered pod template by `podspec.plan_pod` (image, command/args, env, securityContext,
seccomp, volumes). Services are mirrored on a podman network the harness creates and removes:
every container gets `--add-host` entries so the rendered Service DNS names resolve to the
container that backs them (no cluster DNS is needed; traffic stays on this machine).

Seccomp: `RuntimeDefault` is emulated with Docker's default profile (the shared
`seccomp/docker-default.json`, as containerd/CRI-O's defaults refuse the same calls);
`Localhost` profiles are looked up in a kubelet-like seccomp root the harness fills the way the
chart's profile installer does: every rendered ConfigMap labelled
`distrs.io/seccomp-profiles: "true"` has each data key K written to `<root>/distrs/K`.

The planner gets in-cluster configuration (service-account token, CA, namespace and
KUBERNETES_SERVICE_HOST/PORT) pointing at the Kubernetes HTTP stand-in behind a TLS front the
harness runs on the network's gateway address; the stand-in holds one Deployment per stage.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import functools
import ipaddress
import json
import os
import random
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.pods import podspec
from tests.unit.helm.chart_render import NAMESPACE, render

REPO = Path(__file__).resolve().parents[2]
TRAINER_TOKEN = "pods-trainer-" + "t" * 24
TRAINER_TENANT = "pods"
SEE_LOGS = "container log follows"


def runtime_default_profile() -> Path:
    """The file that emulates `seccompProfile: RuntimeDefault` (DISTRS_RUNTIME_DEFAULT_SECCOMP overrides)."""
    env = os.environ.get("DISTRS_RUNTIME_DEFAULT_SECCOMP")
    return Path(env) if env else REPO.parent / "shared" / "seccomp" / "docker-default.json"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v)
            if isinstance(v, dict) and isinstance(out.get(k), dict)
            else copy.deepcopy(v)
        )
    return out


class Podman:
    """`podman` with the harness's containers.conf (runc, cgroupfs, fixed ulimits)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} ... failed ({r.returncode}): {r.stderr.strip()}")
        return r


class TLSFront:
    """TLS on (host, any port) forwarded to a plain-HTTP backend: the API server address of the pods.

    Bound on all addresses: the network's bridge (the gateway address the pods dial) exists only
    once its first container runs.
    """

    def __init__(self, host: str, backend: tuple[str, int], cert: Path, key: Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.backend = backend
        self.sock = socket.create_server(
            (host, 0)
        )  # all addresses: the bridge appears with the first container
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
            back = socket.create_connection(self.backend)
        except (OSError, ssl.SSLError):
            conn.close()
            return

        def pump(a: socket.socket, b: socket.socket) -> None:
            with contextlib.suppress(OSError, ssl.SSLError):
                while data := a.recv(65536):
                    b.sendall(data)
            with contextlib.suppress(OSError):
                b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(back, tls), daemon=True)
        t.start()
        pump(tls, back)
        t.join(timeout=30)
        for s in (tls, back):
            with contextlib.suppress(OSError):
                s.close()

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclasses.dataclass
class Container:
    name: str  # the podman container (unique on the host)
    component: str  # redis | proxy | planner | worker
    stage: str | None
    ip: str
    spec: dict[str, Any]  # the rendered pod spec
    pod: str = ""  # the pod name (hostname, metadata.name); StatefulSet names repeat across runs


@dataclasses.dataclass
class System:
    """Handles on a running release: what tests use."""

    proxy_url: str
    trainer_token: str
    worker_token: str
    admin_token: str
    workers: dict[str, str]  # stage -> container name
    containers: dict[str, Container]  # name -> container
    objects: list[dict[str, Any]]  # the rendered release
    kube: Any  # the Kubernetes stand-in the planner talks to (or None)
    _podman: Podman
    _cleanup: list[Callable[[], object]]

    def name_of(self, component: str) -> str:
        return next(c.name for c in self.containers.values() if c.component == component)

    def logs(self, name: str) -> str:
        """stdout + stderr of a container so far."""
        r = self._podman("logs", name, check=False)
        return r.stdout + r.stderr

    def running(self, name: str) -> bool:
        r = self._podman("inspect", "--format", "{{.State.Running}}", name, check=False)
        return r.stdout.strip() == "true"

    def ready(self, name: str) -> bool:
        """The container's readinessProbe, evaluated as the kubelet would (one try)."""
        c = self.containers[name]
        if not self.running(name):
            return False
        spec = c.spec["containers"][0]
        probe = spec.get("readinessProbe")
        if not probe:
            return True
        ports = {p.get("name"): p["containerPort"] for p in spec.get("ports") or []}
        if "httpGet" in probe:
            g = probe["httpGet"]
            port = ports.get(g["port"], g["port"])
            try:
                with urllib.request.urlopen(f"http://{c.ip}:{port}{g.get('path', '/')}", timeout=3) as r:
                    return 200 <= r.status < 400
            except (urllib.error.URLError, OSError):
                return False
        if "tcpSocket" in probe:
            port = ports.get(probe["tcpSocket"]["port"], probe["tcpSocket"]["port"])
            try:
                socket.create_connection((c.ip, int(port)), timeout=3).close()
                return True
            except OSError:
                return False
        if "exec" in probe:
            r = self._podman("exec", name, *probe["exec"]["command"], check=False, timeout=30)
            return r.returncode == 0
        raise podspec.Unsupported(f"readinessProbe {sorted(probe)}")

    def wait_ready(self, name: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready(name):
                return
            if not self.running(name):
                break
            time.sleep(0.5)
        raise RuntimeError(f"{name} not ready within {timeout:.0f} s; {SEE_LOGS}:\n{self.logs(name)[-4000:]}")

    def stop(self) -> None:
        while self._cleanup:
            with contextlib.suppress(Exception):
                self._cleanup.pop()()


def _pod_name(workload: dict[str, Any]) -> str:
    name = workload["metadata"]["name"]
    if workload["kind"] == "StatefulSet":
        return f"{name}-0"
    alnum = "bcdfghjklmnpqrstvwxz2456789"
    return f"{name}-{secrets.token_hex(5)}-{''.join(random.choice(alnum) for _ in range(5))}"


def _free_subnet(podman: Podman) -> ipaddress.IPv4Network:
    used = set()
    r = podman("network", "ls", "--format", "{{range .Subnets}}{{.Subnet}} {{end}}", check=False)
    for s in r.stdout.split():
        with contextlib.suppress(ValueError):
            used.add(ipaddress.ip_network(s))
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{random.randint(180, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for the test network")


def _write_tls(dirpath: Path, ip: str) -> tuple[Path, Path]:
    key, cert = dirpath / "apiserver.key", dirpath / "apiserver.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kubernetes",
         "-addext", f"subjectAltName=IP:{ip},DNS:kubernetes.default.svc", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def install_seccomp_profiles(objs: list[dict[str, Any]], root: Path, extra: dict[str, Path]) -> None:
    """Fill a kubelet seccomp root as the chart's profile installer does.

    Every ConfigMap labelled `distrs.io/seccomp-profiles: "true"` has each data key K written to
    `<root>/distrs/K`; `extra` adds files (relative path -> source) a node admin would install.
    """
    root.mkdir(parents=True, exist_ok=True)
    for o in objs:
        labels = o["metadata"].get("labels") or {}
        if o["kind"] == "ConfigMap" and labels.get("distrs.io/seccomp-profiles") == "true":
            for k, data in podspec.configmap_data(o).items():
                (root / "distrs").mkdir(exist_ok=True)
                (root / "distrs" / k).write_bytes(data)
    for rel, src in extra.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, root / rel)


def start_system(
    values: dict[str, Any],
    images: dict[str, str],
    podman_env: dict[str, str],
    *,
    seccomp_profiles: dict[str, Path] | None = None,
    ready_timeout: float = 180,
    wait_workers: bool = True,
    host_mounts: dict[str, list[tuple[Path, str]]] | None = None,
) -> System:
    """Render the chart with `values` and start the release; `stop()` removes everything.

    `images`: kind -> image (service, worker, worker-gpu, redis), set as the chart's image values.
    `seccomp_profiles`: extra files for the kubelet seccomp root, relative path -> source file.
    `wait_workers=False` returns once Redis and the proxy are ready (for workers expected unready).
    `host_mounts`: stage -> [(host directory, container path)], writable binds into that stage's
    workers (a node's disk that outlives the release, e.g. a build cache kept across runs).
    """
    from tests.integration.k8s.kube_standin import KubeStandIn

    repo_tag = {k: v.rsplit(":", 1) for k, v in images.items()}
    image_values: dict[str, Any] = {
        "image": {"repository": repo_tag["service"][0], "tag": repo_tag["service"][1]},
        "redis": {"image": {"repository": repo_tag["redis"][0], "tag": repo_tag["redis"][1]}},
        "workers": {
            "defaults": {"image": {"repository": repo_tag["worker"][0], "tag": repo_tag["worker"][1]}},
            "stages": {"execute": {"image": {"repository": repo_tag["worker-gpu"][0], "tag": repo_tag["worker-gpu"][1]}}},
        },
        "auth": {"trainers": [{"token": TRAINER_TOKEN, "tenant": TRAINER_TENANT}]},
    }  # fmt: skip
    objs = render(deep_merge(image_values, values))
    podman = Podman(podman_env)
    cleanup: list[Callable[[], object]] = []
    work = Path(tempfile.mkdtemp(prefix="distrs-pods-", dir="/var/tmp"))
    work.chmod(0o755)
    cleanup.append(lambda: shutil.rmtree(work, ignore_errors=True))
    system = System("", "", "", "", {}, {}, objs, None, podman, cleanup)
    try:
        _start(
            system,
            objs,
            podman,
            work,
            seccomp_profiles or {},
            ready_timeout,
            KubeStandIn,
            wait_workers,
            host_mounts or {},
        )
    except BaseException:
        system.stop()
        raise
    return system


def _start(
    system: System,
    objs: list[dict[str, Any]],
    podman: Podman,
    work: Path,
    seccomp_profiles: dict[str, Path],
    ready_timeout: float,
    standin_cls: Any,
    wait_workers: bool,
    host_mounts: dict[str, list[tuple[Path, str]]],
) -> None:
    secrets_ = {o["metadata"]["name"]: podspec.secret_data(o) for o in objs if o["kind"] == "Secret"}
    configmaps = {o["metadata"]["name"]: podspec.configmap_data(o) for o in objs if o["kind"] == "ConfigMap"}
    auth = next(v for k, v in secrets_.items() if k.endswith("-auth"))
    system.worker_token = auth["worker-token"].decode()
    system.admin_token = auth["admin-token"].decode()
    system.trainer_token = TRAINER_TOKEN

    # The kubelet's seccomp root, filled like the chart's profile installer would.
    seccomp_root = work / "seccomp"
    install_seccomp_profiles(objs, seccomp_root, seccomp_profiles)

    # The network and one address per workload.
    subnet = _free_subnet(podman)
    net = f"distrs-pods-{secrets.token_hex(4)}"
    podman("network", "create", "--disable-dns", "--subnet", str(subnet), net)
    system._cleanup.append(lambda: podman("network", "rm", "-f", net, check=False))
    hosts_ip = list(subnet.hosts())
    gateway = str(hosts_ip[0])

    workloads = [o for o in objs if o["kind"] in ("StatefulSet", "Deployment")]
    order = {"redis": 0, "proxy": 1, "planner": 2, "worker": 3}
    workloads.sort(
        key=lambda o: (
            order.get(o["metadata"]["labels"].get("app.kubernetes.io/component", ""), 9),
            o["metadata"]["name"],
        )
    )
    planned: list[tuple[dict[str, Any], Container]] = []
    for i, w in enumerate(workloads):
        labels = w["spec"]["template"]["metadata"]["labels"]
        comp = labels.get("app.kubernetes.io/component", "")
        spec = copy.deepcopy(w["spec"]["template"]["spec"])
        for vct in w["spec"].get("volumeClaimTemplates") or []:
            spec.setdefault("volumes", []).append(
                {"name": vct["metadata"]["name"], "persistentVolumeClaim": {}}
            )
        pod_name = _pod_name(w)
        name = f"{pod_name}-{net[-8:]}" if w["kind"] == "StatefulSet" else pod_name  # one per host
        planned.append(
            (w, Container(name, comp, labels.get("distrs.io/stage"), str(hosts_ip[9 + i]), spec, pod_name))
        )

    # Services -> the container whose pod labels match the selector.
    hosts: dict[str, str] = {}
    for svc in (o for o in objs if o["kind"] == "Service"):
        sel = svc["spec"].get("selector") or {}
        for w, c in planned:
            if sel and all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items()):
                n = svc["metadata"]["name"]
                for h in (
                    n,
                    f"{n}.{NAMESPACE}",
                    f"{n}.{NAMESPACE}.svc",
                    f"{n}.{NAMESPACE}.svc.cluster.local",
                ):
                    hosts[h] = c.ip
                if w["kind"] == "StatefulSet":
                    hosts[f"{c.pod}.{n}.{NAMESPACE}.svc"] = c.ip
                break

    # The Kubernetes API the planner sees: the stand-in, behind TLS on the gateway address.
    kube = standin_cls().start()
    system.kube = kube
    system._cleanup.append(kube.stop)
    for w, _ in planned:
        if (
            w["kind"] == "Deployment"
            and w["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
        ):
            stage = w["metadata"]["labels"]["distrs.io/stage"]
            kube.add_deployment(NAMESPACE, w["metadata"]["name"], stage, replicas=w["spec"]["replicas"])
    sa = work / "serviceaccount"
    sa.mkdir()
    cert, key = _write_tls(work, gateway)
    shutil.copyfile(cert, sa / "ca.crt")
    (sa / "token").write_text("pods-serviceaccount-token")
    (sa / "namespace").write_text(NAMESPACE)
    for f in sa.iterdir():
        f.chmod(0o644)
    backend = kube.url.removeprefix("http://").split(":")
    front = TLSFront("0.0.0.0", (backend[0], int(backend[1])), cert, key)
    system._cleanup.append(front.stop)

    plans = []  # every pod planned before any starts: an unsupported spec fails fast
    for _, c in planned:
        pod = c.spec
        extra_env: dict[str, str] = {}
        extra_mounts: list[tuple[Path, str]] = []
        if pod.get("automountServiceAccountToken", True):
            extra_env = {"KUBERNETES_SERVICE_HOST": gateway, "KUBERNETES_SERVICE_PORT": str(front.port)}
            extra_mounts = [(sa, "/var/run/secrets/kubernetes.io/serviceaccount")]
        vol_root = work / "volumes" / c.name
        cluster = podspec.Cluster(
            namespace=NAMESPACE,
            secrets=secrets_,
            configmaps=configmaps,
            runtime_default_seccomp=runtime_default_profile(),
            seccomp_root=seccomp_root,
            volume_root=vol_root,
            network=net,
            hosts=hosts,
            extra_env=extra_env,
            extra_mounts=extra_mounts,
            host_mounts=host_mounts.get(c.stage or "", []) if c.component == "worker" else [],
        )
        plans.append((c, podspec.plan_pod(c.pod, pod, None, cluster, c.ip, container_name=c.name)))
    for c, plan in plans:
        pod = c.spec
        for d in plan.dirs:
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o777)
        for p, data in plan.files.items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            p.chmod(0o644)
        podman("run", *plan.args)
        system._cleanup.append(functools.partial(podman, "rm", "-f", "-t", "2", c.name, check=False))
        system.containers[c.name] = c
        if c.component == "worker" and c.stage:
            system.workers[c.stage] = c.name
        if c.component == "proxy":
            port = pod["containers"][0]["ports"][0]["containerPort"]
            system.proxy_url = f"http://{c.ip}:{port}"
        if c.component in ("redis", "proxy"):  # the others need these up first
            system.wait_ready(c.name, ready_timeout)
    for c in system.containers.values():
        if c.component not in ("redis", "proxy") and (wait_workers or c.component != "worker"):
            system.wait_ready(c.name, ready_timeout)


def auth_header(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()
