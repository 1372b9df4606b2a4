"""Translate one rendered Kubernetes pod template into a `podman run` command line.

What the kubelet and a CRI runtime would do with the pod, as far as it matters for DistRS:
image, command/args (`$(VAR)` expansion), env (value, secretKeyRef, configMapKeyRef, fieldRef),
runAsUser/runAsGroup/fsGroup/supplementalGroups, capabilities, privileged, procMount,
allowPrivilegeEscalation, readOnlyRootFilesystem, seccompProfile, hostUsers, volumes (emptyDir,
secret, configMap, persistentVolumeClaim) and memory/CPU limits. Anything the harness cannot
emulate faithfully (a runtimeClassName, an unknown volume type, an unknown fieldRef) raises
`Unsupported` instead of being silently dropped: a test that passes here must mean the rendered
pod works.

Pure: file writes happen in the caller (`PodPlan.files`); this module only plans.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

# Capabilities containerd/CRI-O grant by default (podman's own default set is smaller).
RUNTIME_DEFAULT_CAPS = (
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
    "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
)  # fmt: skip
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


class Unsupported(Exception):
    """The pod asks for something this harness cannot emulate."""


@dataclasses.dataclass
class PodPlan:
    """What to create and run for one pod (one container)."""

    name: str
    args: list[str]  # `podman run` arguments after `run`
    files: dict[Path, bytes]  # volume contents to write before the run (secret/configMap)
    dirs: list[Path]  # emptyDir / PVC directories to create (mode 0777, like the kubelet)
    env: dict[str, str]
    user: tuple[int, int] | None


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined vars replaced, `$$` escapes, unknown left as is."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def secret_data(obj: dict[str, Any]) -> dict[str, bytes]:
    out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    out.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
    return out


def configmap_data(obj: dict[str, Any]) -> dict[str, bytes]:
    out = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return out


@dataclasses.dataclass
class Cluster:
    """What the pod may reference: rendered Secrets/ConfigMaps, paths, the network."""

    namespace: str
    secrets: dict[str, dict[str, bytes]]
    configmaps: dict[str, dict[str, bytes]]
    runtime_default_seccomp: Path  # emulates RuntimeDefault (containerd's default profile)
    seccomp_root: Path  # the kubelet's seccomp directory for Localhost profiles
    volume_root: Path  # where this pod's volumes live on the host
    network: str
    hosts: dict[str, str]  # DNS name -> IP (the Services)
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)  # KUBERNETES_SERVICE_*
    extra_mounts: list[tuple[Path, str]] = dataclasses.field(default_factory=list)  # read-only binds
    # Writable host directories (a node's disk a test keeps across runs, e.g. a build cache).
    host_mounts: list[tuple[Path, str]] = dataclasses.field(default_factory=list)


def _env(container: dict[str, Any], pod_name: str, cluster: Cluster) -> dict[str, str]:
    env: dict[str, str] = dict(cluster.extra_env)
    for e in container.get("env") or []:
        name = e["name"]
        if "value" in e:
            env[name] = expand(str(e["value"]), env)
            continue
        src = e.get("valueFrom") or {}
        if "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            data = cluster.secrets.get(ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise Unsupported(f"env {name}: Secret {ref['name']} key {ref['key']} is not rendered")
            env[name] = data[ref["key"]].decode()
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            cm = cluster.configmaps.get(ref["name"])
            if cm is None or ref["key"] not in cm:
                if ref.get("optional"):
                    continue
                raise Unsupported(f"env {name}: ConfigMap {ref['name']} key {ref['key']} is not rendered")
            env[name] = cm[ref["key"]].decode()
        elif "fieldRef" in src:
            path = src["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": pod_name,
                "metadata.namespace": cluster.namespace,
                "spec.nodeName": "pods-node",
            }
            if path not in fields:
                raise Unsupported(f"env {name}: fieldRef {path}")
            env[name] = fields[path]
        else:
            raise Unsupported(f"env {name}: valueFrom {sorted(src)}")
    for ef in container.get("envFrom") or []:
        raise Unsupported(f"envFrom {ef}")
    return env


def _seccomp(profile: dict[str, Any] | None, cluster: Cluster) -> str:
    kind = (profile or {}).get("type", "Unconfined")
    if kind == "RuntimeDefault":
        if not cluster.runtime_default_seccomp.is_file():
            raise Unsupported(f"RuntimeDefault: no profile file at {cluster.runtime_default_seccomp}")
        return f"seccomp={cluster.runtime_default_seccomp}"
    if kind == "Localhost":
        rel = profile.get("localhostProfile") if profile else None
        if not rel:
            raise Unsupported("seccompProfile Localhost without localhostProfile")
        path = cluster.seccomp_root / rel
        if not path.is_file():
            # What the kubelet does: the container fails to start (CreateContainerError).
            raise Unsupported(
                f"seccompProfile Localhost: {rel} is not installed under {cluster.seccomp_root}"
            )
        return f"seccomp={path}"
    if kind == "Unconfined":
        return "seccomp=unconfined"
    raise Unsupported(f"seccompProfile type {kind}")


def _quantity_bytes(q: str) -> int:
    units = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
    }
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    if not m or (m.group(2) and m.group(2) not in units):
        raise Unsupported(f"quantity {q!r}")
    return int(float(m.group(1)) * units.get(m.group(2), 1))


def _cpus(q: str) -> float:
    s = str(q)
    return int(s[:-1]) / 1000 if s.endswith("m") else float(s)


def plan_pod(
    pod_name: str,
    spec: dict[str, Any],
    image: str | None,
    cluster: Cluster,
    ip: str,
    userns_base: int = 200_000,
    container_name: str | None = None,
) -> PodPlan:
    """`podman run` arguments for the pod's single container (init/sidecar containers refused).

    `container_name` (default: the pod name) keeps concurrent runs of one StatefulSet apart.
    """
    if spec.get("initContainers"):
        raise Unsupported("initContainers")
    containers = spec["containers"]
    if len(containers) != 1:
        raise Unsupported(f"{len(containers)} containers in one pod")
    c = containers[0]
    if spec.get("runtimeClassName"):
        raise Unsupported(
            f"runtimeClassName {spec['runtimeClassName']!r}: the pod-runtime harness has only runc"
        )
    psc = spec.get("securityContext") or {}
    csc = c.get("securityContext") or {}

    def sc(key: str) -> Any:
        return csc[key] if key in csc else psc.get(key)

    env = _env(c, pod_name, cluster)
    name = container_name or pod_name
    args = ["--name", name, "--hostname", pod_name[:63], "--pull", "never", "--detach"]
    args += ["--network", cluster.network, "--ip", ip]
    for host, host_ip in sorted(cluster.hosts.items()):
        args += ["--add-host", f"{host}:{host_ip}"]

    uid, gid = sc("runAsUser"), sc("runAsGroup")
    if sc("runAsNonRoot") and uid in (None, 0):
        raise Unsupported("runAsNonRoot with runAsUser unset or 0 (the kubelet refuses the pod)")
    user = None
    if uid is not None:
        user = (int(uid), int(gid if gid is not None else 0))
        args += ["--user", f"{user[0]}:{user[1]}"]
    groups = [*(psc.get("supplementalGroups") or [])]
    if psc.get("fsGroup") is not None:
        groups.append(psc["fsGroup"])
    for g in groups:
        args += ["--group-add", str(g)]

    if sc("privileged"):
        args += ["--privileged"]
    caps = csc.get("capabilities") or {}
    drop = [x.upper() for x in caps.get("drop") or []]
    add = [x.upper() for x in caps.get("add") or []]
    if "ALL" in drop:
        args += ["--cap-drop", "all"]
    else:
        args += [x for cap in RUNTIME_DEFAULT_CAPS if cap not in drop for x in ("--cap-add", cap)]
        args += [x for cap in drop for x in ("--cap-drop", cap)]
    args += [x for cap in add for x in ("--cap-add", cap)]
    if sc("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if csc.get("procMount") == "Unmasked":
        args += ["--security-opt", "unmask=ALL"]
    elif csc.get("procMount") not in (None, "Default"):
        raise Unsupported(f"procMount {csc['procMount']}")
    if sc("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    args += ["--security-opt", _seccomp(sc("seccompProfile"), cluster)]
    if spec.get("hostUsers") is False:
        # A user-namespaced pod: container ids 0..65535 map to an unprivileged host range.
        args += ["--uidmap", f"0:{userns_base}:65536", "--gidmap", f"0:{userns_base}:65536"]

    limits = (c.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        args += ["--memory", str(_quantity_bytes(limits["memory"]))]
    if "cpu" in limits:
        args += ["--cpus", str(_cpus(limits["cpu"]))]

    files: dict[Path, bytes] = {}
    dirs: list[Path] = []
    vols: dict[str, Path] = {}
    read_only_vol: dict[str, bool] = {}
    for v in spec.get("volumes") or []:
        path = cluster.volume_root / v["name"]
        if "emptyDir" in v or "persistentVolumeClaim" in v:
            dirs.append(path)
        elif "secret" in v or "configMap" in v:
            src = v.get("secret") or v.get("configMap")
            name = src.get("secretName") or src.get("name")
            data = cluster.secrets.get(name) if "secret" in v else cluster.configmaps.get(name)
            if data is None:
                raise Unsupported(f"volume {v['name']}: {name} is not rendered")
            items = src.get("items") or [{"key": k, "path": k} for k in data]
            for it in items:
                files[path / it["path"]] = data[it["key"]]
            dirs.append(path)
            read_only_vol[v["name"]] = True
        else:
            raise Unsupported(f"volume {v['name']}: type {sorted(set(v) - {'name'})}")
        vols[v["name"]] = path
    # StatefulSet volumeClaimTemplates arrive as extra volumes named like the claim.
    for vm in c.get("volumeMounts") or []:
        if vm["name"] not in vols:
            raise Unsupported(f"volumeMount {vm['name']}: no such volume")
        ro = vm.get("readOnly") or read_only_vol.get(vm["name"], False)
        src = vols[vm["name"]] / vm["subPath"] if vm.get("subPath") else vols[vm["name"]]
        args += ["--volume", f"{src}:{vm['mountPath']}:{'ro' if ro else 'rw'}"]
    for host_path, target in cluster.extra_mounts:
        args += ["--volume", f"{host_path}:{target}:ro"]
    for host_path, target in cluster.host_mounts:
        args += ["--volume", f"{host_path}:{target}:rw"]

    if c.get("workingDir"):
        args += ["--workdir", c["workingDir"]]
    for k, val in env.items():
        args += ["--env", f"{k}={val}"]
    command = [expand(x, env) for x in c.get("command") or []]
    cargs = [expand(x, env) for x in c.get("args") or []]
    if command:
        args += ["--entrypoint", json.dumps(command)]
    args.append(image or c["image"])
    args += cargs
    return PodPlan(name, args, files, dirs, env, user)
