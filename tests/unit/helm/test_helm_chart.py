"""The Helm chart, rendered by the real Helm engine for the defaults and several value sets.

Every case must lint without errors, pass the chart's values.schema.json and yield objects that
validate strictly against the Kubernetes schema; then each case checks what it is about.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from distrs.core.pipeline_config import load_pipelines
from tests.requirements import need_module
from tests.unit.helm.chart_render import CHART, NAMESPACE, env_of, find, one, pod_specs, render, validate

helm = need_module("helm_python", "the chart is rendered with it (the dev extra installs it)")

F = "rel-distrs"
PIPELINES = Path(__file__).resolve().parents[3] / "distrs" / "core" / "default_pipelines.yaml"

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external-redis": {"redis": {"enabled": False, "external": {"url": "rediss://:pw@redis.example:6380/0"}}},
    "gpu-tolerations": {
        "workers": {
            "stages": {
                "execute": {
                    "gpus": 2,
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "tolerations": [
                        {
                            "key": "nvidia.com/gpu",
                            "operator": "Equal",
                            "value": "present",
                            "effect": "NoSchedule",
                        }
                    ],
                }
            }
        }
    },
    "gpu-whole": {"workers": {"stages": {"execute": {"gpuResource": "nvidia.com/gpu", "gpus": 1}}}},
    "gpu-mig": {"workers": {"stages": {"execute": {"gpuResource": "nvidia.com/mig-1g.10gb"}}}},
    "gpu-time-sliced": {
        "workers": {
            "stages": {"execute": {"gpuResource": "nvidia.com/gpu.shared", "gpuSharing": "time-sliced"}}
        }
    },
    "monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
            "auth": {"enabled": True},
        }
    },
    "gvisor": {
        "workers": {
            "stages": {"run": {"runtimeClassName": "gvisor"}, "compile": {"runtimeClassName": "gvisor"}}
        }
    },
    "ingress": {
        "proxy": {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "hosts": [{"host": "rewards.example.com"}],
                "tls": [{"secretName": "rewards-tls", "hosts": ["rewards.example.com"]}],
            }
        }
    },
    "planner-ha": {"planner": {"replicas": 2}},
    "sandbox-userns": {"sandbox": {"mode": "userNamespace"}},
    "sandbox-runtime-default": {"sandbox": {"mode": "runtimeDefault", "allowDegraded": True}},
    "sandbox-own-profile": {
        "sandbox": {
            "seccompProfile": {"installer": "none", "localhostProfile": "operator/rewards/distrs.json"},
            "appArmorProfile": {"type": "Unconfined"},
        }
    },
    "tokens-and-pipelines": {
        "auth": {"trainers": [{"token": "t" * 24, "tenant": "team-a"}], "workerToken": "w" * 24},
        "pipelines": yaml.safe_load(PIPELINES.read_text()),
        "networkPolicy": {"proxyIngressFrom": [{"namespaceSelector": {"matchLabels": {"team": "rl"}}}]},
    },
}


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


@pytest.fixture(scope="module")
def rendered(chart: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: render(values, chart=chart) for name, values in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_case_lints_passes_schema_and_validates(chart: Any, rendered: dict[str, Any], case: str) -> None:
    report = helm.lint(CHART, CASES[case], namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    chart.validate_schema(CASES[case])
    objs = rendered[case]
    assert len(objs) > 10
    for obj in objs:
        validate(obj)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), "duplicate objects"
    for o in objs:
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_defaults_objects(rendered: dict[str, Any]) -> None:
    objs = rendered["defaults"]
    for kind, name in [
        ("Deployment", f"{F}-proxy"),
        ("Service", f"{F}-proxy"),
        ("PodDisruptionBudget", f"{F}-proxy"),
        ("Deployment", f"{F}-planner"),
        ("ServiceAccount", f"{F}-planner"),
        ("Role", f"{F}-planner"),
        ("RoleBinding", f"{F}-planner"),
        ("StatefulSet", f"{F}-redis"),
        ("Secret", f"{F}-auth"),
        ("Secret", f"{F}-redis"),
        ("ConfigMap", f"{F}-dashboard"),
        ("NetworkPolicy", f"{F}-workers"),
        ("Pod", f"{F}-test"),
    ]:
        one(objs, kind, name)
    workers = sorted(
        o["metadata"]["name"] for o in find(objs, "Deployment") if "-worker-" in o["metadata"]["name"]
    )
    assert workers == [f"{F}-worker-{s}" for s in ("compile", "execute", "run", "verify")]
    assert find(objs, "Ingress") == [] and find(objs, "ServiceMonitor") == []
    test_pod = one(objs, "Pod", f"{F}-test")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"


def test_services_select_their_pods(rendered: dict[str, Any]) -> None:
    objs = rendered["defaults"]
    for svc in find(objs, "Service"):
        sel = svc["spec"]["selector"]
        owners = [
            o
            for o in objs
            if o["kind"] in ("Deployment", "StatefulSet")
            and sel.items() <= o["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(owners) == 1, svc["metadata"]["name"]
        ports = {
            p["name"] for c in owners[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports


@pytest.mark.parametrize("case", list(CASES))
def test_pods_are_hardened(rendered: dict[str, Any], case: str) -> None:
    for where, spec in pod_specs(rendered[case]):
        psc = spec["securityContext"]
        if "worker" in where and case == "sandbox-userns":
            continue  # root of its own user namespace: test_user_namespace_mode
        assert psc["runAsNonRoot"] is True, where
        if "worker" in where and case not in ("sandbox-runtime-default",):
            # the jail's namespaces: a Localhost profile, never Unconfined
            assert psc["seccompProfile"]["type"] == "Localhost", where
        else:
            assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        mounts_ok = {
            v["name"] for v in spec.get("volumes", []) if "emptyDir" in v or "persistentVolumeClaim" in v
        }
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            tmp = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
            assert tmp and tmp[0]["name"] in mounts_ok, f"{where}: no writable /tmp"
        planner = "planner" in where
        assert spec["automountServiceAccountToken"] is planner, where
        # Pod Security Standards, "restricted" profile: nothing from the host, non-root user.
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        assert all(
            set(v) & {"emptyDir", "configMap", "secret", "persistentVolumeClaim", "name"} == set(v)
            for v in spec.get("volumes", [])
        ), where
        assert psc.get("runAsUser", 1) != 0, where
        for c in spec["containers"]:
            assert not c["securityContext"].get("privileged"), where
            assert set(c["securityContext"]["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}, where


def test_workers_match_pipeline_stages(rendered: dict[str, Any]) -> None:
    stages = yaml.safe_load(PIPELINES.read_text())["stages"]
    table = load_pipelines()
    objs = rendered["defaults"]
    for name, stage in stages.items():
        dep = one(objs, "Deployment", f"{F}-worker-{name}")
        spec = dep["spec"]["template"]["spec"]
        # a draining worker finishes its request: the longest any type may take at the stage
        longest = max(table.timeout_s(t, name) for t, rt in table.reward_types.items() if name in rt.stages)
        assert spec["terminationGracePeriodSeconds"] >= max(stage["timeout_s"], longest)
        c = spec["containers"][0]
        assert c["command"][:4] == ["distrs", "worker", "--stage", name]
        assert c["resources"]["requests"]["cpu"] == stage["resources"]["cpu"]
        gpus = c["resources"].get("limits", {}).get("nvidia.com/gpu", 0)
        assert gpus == stage["resources"].get("gpus", 0)
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert env_of(c)["DISTRS_HEALTH_PORT"] == "8081"
        assert dep["spec"]["replicas"] == 0
        assert dep["spec"]["selector"]["matchLabels"]["distrs.io/stage"] == name


def test_gpu_stage_gets_gpus_node_selector_and_tolerations(rendered: dict[str, Any]) -> None:
    spec = one(rendered["gpu-tolerations"], "Deployment", f"{F}-worker-execute")["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    # Helm merges maps: the default GPU label stays unless set to null.
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "nvidia.com/gpu.present": "true",
    }
    assert spec["tolerations"][0]["value"] == "present"
    cpu = one(rendered["gpu-tolerations"], "Deployment", f"{F}-worker-compile")["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"].get("limits", {})
    assert "tolerations" not in cpu and "nodeSelector" not in cpu


@pytest.mark.parametrize(
    ("case", "resource", "sharing", "flags"),
    [
        ("defaults", "nvidia.com/gpu", "exclusive", []),
        ("gpu-whole", "nvidia.com/gpu", "exclusive", []),
        ("gpu-mig", "nvidia.com/mig-1g.10gb", "mig", ["mig_slice"]),
        ("gpu-time-sliced", "nvidia.com/gpu.shared", "time-sliced", ["time_sliced_gpu"]),
    ],
)
def test_gpu_stage_modes(
    rendered: dict[str, Any], case: str, resource: str, sharing: str, flags: list[str]
) -> None:
    """Whole GPU, one MIG slice per worker, time-sliced: the resource the pod asks for, and what
    the worker is told, which decides the flags its results carry."""
    from distrs.rewards.gpu_env import timing_flags

    dep = one(rendered[case], "Deployment", f"{F}-worker-execute")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    gpu_limits = {k: v for k, v in c["resources"]["limits"].items() if k.startswith("nvidia.com/")}
    assert gpu_limits == {resource: 1}  # one GPU or one slice per execute worker
    env = env_of(c)
    assert (env["DISTRS_GPU_RESOURCE"], env["DISTRS_GPU_SHARING"]) == (resource, sharing)
    assert [f["flag"] for f in timing_flags(env)] == flags
    assert dep["spec"]["template"]["metadata"]["labels"]["distrs.io/resource-class"] == "gpu"
    cpu = one(rendered[case], "Deployment", f"{F}-worker-compile")["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert "DISTRS_GPU_SHARING" not in env_of(cpu)


def test_gpu_workers_metrics_are_scraped(rendered: dict[str, Any]) -> None:
    objs = rendered["monitoring"]
    pm = one(objs, "PodMonitor", f"{F}-gpu-workers")
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["path"] == "/metrics" and ep["port"] == "health"
    selected = [
        d["metadata"]["name"]
        for d in find(objs, "Deployment")
        if pm["spec"]["selector"]["matchLabels"].items()
        <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert selected == [f"{F}-worker-execute"]
    ports = {
        p["name"]
        for p in one(objs, "Deployment", selected[0])["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert "health" in ports
    assert find(rendered["defaults"], "PodMonitor") == []  # only with monitoring on


def test_redis_statefulset_has_pvc_and_aof(rendered: dict[str, Any]) -> None:
    sts = one(rendered["defaults"], "StatefulSet", f"{F}-redis")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi"
    proxy = one(rendered["defaults"], "Deployment", f"{F}-proxy")["spec"]["template"]["spec"]["containers"][0]
    assert f"{F}-redis.{NAMESPACE}.svc:6379" in env_of(proxy)["DISTRS_REDIS_URL"]


def test_external_redis_replaces_statefulset(rendered: dict[str, Any]) -> None:
    objs = rendered["external-redis"]
    assert find(objs, "StatefulSet") == [] and find(objs, "NetworkPolicy", f"{F}-redis") == []
    secret = one(objs, "Secret", f"{F}-redis-url")
    import base64

    assert base64.b64decode(secret["data"]["redis-url"]).decode() == "rediss://:pw@redis.example:6380/0"
    for dep in (f"{F}-proxy", f"{F}-planner"):
        c = one(objs, "Deployment", dep)["spec"]["template"]["spec"]["containers"][0]
        assert env_of(c)["DISTRS_REDIS_URL"] == {
            "secretKeyRef": {"name": f"{F}-redis-url", "key": "redis-url"}
        }


def test_service_monitors_point_at_existing_ports(rendered: dict[str, Any]) -> None:
    objs = rendered["monitoring"]
    monitors = find(objs, "ServiceMonitor")
    assert len(monitors) == 2
    for sm in monitors:
        assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        sel = sm["spec"]["selector"]["matchLabels"]
        services = [s for s in find(objs, "Service") if sel.items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1
        assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
    # the proxy's /metrics needs a token: its ServiceMonitor sends the Secret's metrics token, which
    # the proxy accepts (role metrics) and the helm test sends too
    (proxy_sm,) = [m for m in monitors if m["metadata"]["name"].endswith("-proxy")]
    auth = proxy_sm["spec"]["endpoints"][0]["authorization"]
    ref = auth["credentials"]
    assert auth["type"] == "Bearer"
    (secret,) = [s for s in find(objs, "Secret") if s["metadata"]["name"] == ref["name"]]
    token = base64.b64decode(secret["data"][ref["key"]]).decode()
    assert f"{token}:metrics" in base64.b64decode(secret["data"]["tokens"]).decode().split(",")
    (proxy,) = [o for o in find(objs, "Deployment") if o["metadata"]["name"] == f"{F}-proxy"]
    proxy_env = env_of(proxy["spec"]["template"]["spec"]["containers"][0])
    assert proxy_env["DISTRS_METRICS_AUTH"] == "true" and proxy_env["DISTRS_METRICS_TENANT_LABELS"] == "false"


def test_gvisor_runtime_class_only_where_asked(rendered: dict[str, Any]) -> None:
    got = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"].get("runtimeClassName")
        for o in find(rendered["gvisor"], "Deployment")
    }
    assert got[f"{F}-worker-run"] == "gvisor" and got[f"{F}-worker-compile"] == "gvisor"
    assert got[f"{F}-worker-execute"] is None and got[f"{F}-proxy"] is None


def test_ingress_routes_to_proxy_service(rendered: dict[str, Any]) -> None:
    ing = one(rendered["ingress"], "Ingress", f"{F}-proxy")
    assert ing["spec"]["ingressClassName"] == "nginx"
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    svc = one(rendered["ingress"], "Service", backend["name"])
    assert backend["port"]["name"] in {p["name"] for p in svc["spec"]["ports"]}


def test_planner_ha_turns_on_leader_election(rendered: dict[str, Any]) -> None:
    single = one(rendered["defaults"], "Deployment", f"{F}-planner")
    assert "DISTRS_LEADER_LEASE" not in env_of(single["spec"]["template"]["spec"]["containers"][0])
    assert single["spec"]["strategy"]["type"] == "Recreate"
    ha = one(rendered["planner-ha"], "Deployment", f"{F}-planner")
    env = env_of(ha["spec"]["template"]["spec"]["containers"][0])
    role = one(rendered["planner-ha"], "Role", f"{F}-planner")
    lease_rules = [r for r in role["rules"] if r.get("resourceNames") and "leases" in r["resources"]]
    assert lease_rules[0]["resourceNames"] == [env["DISTRS_LEADER_LEASE"]]
    assert env["DISTRS_LEADER_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["DISTRS_DEPLOYMENT_PREFIX"] == f"{F}-worker-"


def test_planner_gets_the_worker_start_time_as_margin_and_lookahead(
    chart: Any, rendered: dict[str, Any]
) -> None:
    from distrs.config import PlannerSettings

    env = env_of(
        one(rendered["defaults"], "Deployment", f"{F}-planner")["spec"]["template"]["spec"]["containers"][0]
    )
    settings = PlannerSettings(
        **{
            k[len("DISTRS_") :].lower(): v
            for k, v in env.items()
            if k.startswith("DISTRS_") and isinstance(v, str)
        }
    )
    assert settings.scale_down_margin_s == 30.0
    assert settings.scale_up_lookahead_s == 35.0  # one re-plan period (5 s) + the start time
    off = render({"planner": {"workerStartSeconds": 0}}, chart=chart)
    env = env_of(one(off, "Deployment", f"{F}-planner")["spec"]["template"]["spec"]["containers"][0])
    assert (
        float(env["DISTRS_SCALE_DOWN_MARGIN_S"]) == 0.0 and float(env["DISTRS_SCALE_UP_LOOKAHEAD_S"]) == 0.0
    )


def test_tokens_secret_and_pipelines_override(rendered: dict[str, Any]) -> None:
    import base64

    objs = rendered["tokens-and-pipelines"]
    data = one(objs, "Secret", f"{F}-auth")["data"]
    tokens = base64.b64decode(data["tokens"]).decode().split(",")
    assert f"{'w' * 24}:worker" in tokens and f"{'t' * 24}:trainer:team-a" in tokens
    assert any(t.endswith(":admin") for t in tokens)
    cm = one(objs, "ConfigMap", f"{F}-pipelines")
    assert yaml.safe_load(cm["data"]["pipelines.yaml"]) == yaml.safe_load(PIPELINES.read_text())
    for dep in find(objs, "Deployment"):
        c = dep["spec"]["template"]["spec"]["containers"][0]
        if dep["metadata"]["name"].endswith("-planner"):  # PlannerSettings has no pipelines_file: --config
            assert c["args"] == ["--config", "/etc/distrs/pipelines.yaml"]
        else:
            assert env_of(c)["DISTRS_PIPELINES_FILE"] == "/etc/distrs/pipelines.yaml"
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["pipelines"] == "/etc/distrs"
    proxy_np = one(objs, "NetworkPolicy", f"{F}-proxy")
    assert proxy_np["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {"team": "rl"}}}]


def test_worker_network_policy_allows_only_proxy_and_dns(rendered: dict[str, Any]) -> None:
    objs = rendered["defaults"]
    np = one(objs, "NetworkPolicy", f"{F}-workers")
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    proxy_labels = one(objs, "Deployment", f"{F}-proxy")["spec"]["template"]["metadata"]["labels"]
    egress = np["spec"]["egress"]
    assert len(egress) == 2
    peer = egress[0]["to"][0]["podSelector"]["matchLabels"]
    assert peer.items() <= proxy_labels.items()
    assert egress[0]["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert {p["port"] for p in egress[1]["ports"]} == {53}
    selected = [
        o["metadata"]["name"]
        for o in find(objs, "Deployment")
        if np["spec"]["podSelector"]["matchLabels"].items()
        <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert sorted(selected) == [f"{F}-worker-{s}" for s in ("compile", "execute", "run", "verify")]
    redis_np = one(objs, "NetworkPolicy", f"{F}-redis")
    assert redis_np["spec"]["egress"] == []


def test_dashboard_configmap_is_the_generated_dashboard(rendered: dict[str, Any]) -> None:
    from distrs import dashboards

    cm = one(rendered["defaults"], "ConfigMap", f"{F}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(cm["data"]["distrs.json"])
    assert shipped == dashboards.build(), (
        "regenerate: python -m distrs.dashboards deploy/helm/distrs/dashboards/distrs.json"
    )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"workers": {"stages": {"compile": {"resourceClass": "tpu"}}}}, "resourceClass"),
        ({"workers": {"stages": {"Bad_Stage": {"resourceClass": "cpu", "timeoutSeconds": 5}}}}, "Bad_Stage"),
        ({"redis": {"external": {"url": "http://nope"}}}, "url"),
        ({"proxy": {"queuePolicy": "lifo"}}, "queuePolicy"),
        ({"planner": {"replicas": 0}}, "replicas"),
        ({"workers": {"stages": {"x": {"enabled": True}}}}, "resourceClass"),
        ({"workers": {"stages": {"execute": {"gpuResource": "nvidia.com/mig-1g.10gb", "gpus": 2}}}}, "gpus"),
        ({"workers": {"stages": {"execute": {"gpuSharing": "time-sliced", "gpus": 2}}}}, "gpus"),
        ({"workers": {"stages": {"execute": {"gpuSharing": "shared"}}}}, "gpuSharing"),
        ({"workers": {"stages": {"execute": {"gpuResource": "a gpu"}}}}, "gpuResource"),
    ],
)
def test_schema_rejects_bad_values_naming_the_field(chart: Any, values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    assert field in str(err.value)


def test_every_distrs_env_var_is_a_real_setting(rendered: dict[str, Any]) -> None:
    """A DISTRS_* variable the settings do not declare would be silently ignored (extra=ignore)."""
    from distrs.config import PlannerSettings, ProxySettings, WorkerSettings

    def fields(*classes: Any) -> set[str]:
        return {f"DISTRS_{name.upper()}" for cls in classes for name in cls.model_fields}

    from distrs.sandbox import SandboxSettings

    allowed = {
        "proxy": fields(ProxySettings),
        "planner": fields(PlannerSettings),
        "worker": fields(WorkerSettings)
        | {f"DISTRS_SANDBOX_{n.upper()}" for n in SandboxSettings.model_fields},
    }
    seen = 0
    for case in ("defaults", "planner-ha", "tokens-and-pipelines"):
        for dep in find(rendered[case], "Deployment"):
            component = dep["metadata"]["labels"]["app.kubernetes.io/component"]
            for c in dep["spec"]["template"]["spec"]["containers"]:
                for name in env_of(c):
                    if name.startswith("DISTRS_"):
                        seen += 1
                        assert name in allowed[component], f"{dep['metadata']['name']}: {name}"
    assert seen > 40


def test_notes_tell_how_to_reach_the_proxy_and_read_tokens(chart: Any) -> None:
    notes = chart.render({}, name="rel", namespace=NAMESPACE)["distrs/templates/NOTES.txt"]
    assert f"http://{F}-proxy.{NAMESPACE}.svc:8000" in notes
    assert f"get secret {F}-auth" in notes and "auth.trainers" in notes
    assert f"{F}-worker-execute  (gpu, timeout 60s)" in notes
    insecure = chart.render({"auth": {"insecure": True}}, name="rel", namespace=NAMESPACE)[
        "distrs/templates/NOTES.txt"
    ]
    assert "WARNING" in insecure


SHARED_SECCOMP = Path(__file__).resolve().parents[4] / "shared" / "seccomp" / "docker-default.json"
PROFILE = CHART / "files" / "seccomp" / "distrs-sandbox.json"


def _workers(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in find(objs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]


def test_default_workers_use_the_profile_the_chart_installs_on_every_node(rendered: dict[str, Any]) -> None:
    objs = rendered["defaults"]
    cms = [
        c
        for c in find(objs, "ConfigMap")
        if c["metadata"]["labels"].get("distrs.io/seccomp-profiles") == "true"
    ]
    assert len(cms) == 1 and len(cms[0]["data"]) == 1
    ((key, text),) = cms[0]["data"].items()
    assert json.loads(text) == json.loads(PROFILE.read_text())
    assert key.startswith("sandbox-") and key.endswith(".json")  # content-addressed
    for w in _workers(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {
            "type": "Localhost",
            "localhostProfile": f"distrs/{key}",
        }
        assert spec["securityContext"]["runAsNonRoot"] is True and "hostUsers" not in spec
        env = env_of(spec["containers"][0])
        assert env["DISTRS_SANDBOX_ALLOW_DEGRADED"] == "false"
        assert env["DISTRS_SANDBOX_DISK_BYTES"] == str(256 << 20) and env["DISTRS_SANDBOX_INODES"] == "10000"
    (ds,) = find(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    host = next(v for v in pod["volumes"] if "hostPath" in v)
    assert host["hostPath"]["path"] == "/var/lib/kubelet/seccomp"
    c = pod["containers"][0]
    assert f"/host-seccomp/distrs/{key}" in c["args"][0]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"operator": "Exists"} in pod["tolerations"]  # GPU nodes too


def test_profile_is_the_runtime_default_plus_the_jails_namespace_calls() -> None:
    if not SHARED_SECCOMP.exists():
        pytest.skip(f"{SHARED_SECCOMP} not present")
    base = json.loads(SHARED_SECCOMP.read_text())
    ours = json.loads(PROFILE.read_text())
    added = ours["syscalls"][len(base["syscalls"]) :]
    assert ours["syscalls"][: len(base["syscalls"])] == base["syscalls"]
    assert {k: v for k, v in ours.items() if k != "syscalls"} == {
        k: v for k, v in base.items() if k != "syscalls"
    }
    assert len(added) == 1 and added[0]["action"] == "SCMP_ACT_ALLOW"
    names = ["clone", "mount", "move_mount", "open_tree", "pivot_root", "umount2", "unshare"]
    assert sorted(added[0]["names"]) == names
    assert "args" not in added[0] and "includes" not in added[0]


def test_user_namespace_mode(rendered: dict[str, Any]) -> None:
    objs = rendered["sandbox-userns"]
    assert len(find(objs, "DaemonSet")) == 1  # the jail still needs the profile (pivot_root)
    for w in _workers(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["hostUsers"] is False
        psc = spec["securityContext"]
        assert psc["runAsUser"] == 0 and psc["runAsNonRoot"] is False
        assert psc["seccompProfile"]["type"] == "Localhost"
        sc = spec["containers"][0]["securityContext"]
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert {"SYS_ADMIN", "NET_ADMIN", "SETUID"} <= set(sc["capabilities"]["add"])
        assert sc["procMount"] == "Unmasked"
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True


def test_runtime_default_mode_and_own_profile(rendered: dict[str, Any]) -> None:
    objs = rendered["sandbox-runtime-default"]
    assert not find(objs, "DaemonSet")
    for w in _workers(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert env_of(spec["containers"][0])["DISTRS_SANDBOX_ALLOW_DEGRADED"] == "true"
    objs = rendered["sandbox-own-profile"]
    assert not find(objs, "DaemonSet")
    for w in _workers(objs):
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {
            "type": "Localhost",
            "localhostProfile": "operator/rewards/distrs.json",
        }
        assert spec["containers"][0]["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}


def test_installer_none_needs_a_profile_path(chart: Any) -> None:
    with pytest.raises(Exception, match="localhostProfile is required"):
        render({"sandbox": {"seccompProfile": {"installer": "none"}}}, chart=chart)
