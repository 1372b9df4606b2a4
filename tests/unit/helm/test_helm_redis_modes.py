"""redis.mode: standalone (the default), cluster (Redis Cluster in the release) and external
(one primary, a Redis Cluster, or a primary watched by Redis Sentinel).

Every case is rendered by the real Helm engine, linted, checked against values.schema.json and
validated strictly against the Kubernetes schema; then the cluster's objects (StatefulSet, headless
Service, PodDisruptionBudget, formation Job, scripts ConfigMap, NetworkPolicy) and the env wiring
of the DistRS processes are checked. tests/pods/test_pods_redis_cluster.py runs the same objects.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.requirements import need_module
from tests.unit.helm.chart_render import CHART, NAMESPACE, env_of, find, one, render, validate

helm = need_module("helm_python", "the chart is rendered with it (the dev extra installs it)")

F = "rel-distrs"
REDIS = f"{F}-redis"  # the standalone StatefulSet, the password Secret, the NetworkPolicy
SVC = f"{F}-redis-cluster"  # the cluster's StatefulSet and headless Service
JOB = f"{SVC}-form"
SCRIPTS = CHART / "files" / "redis-cluster"
EXTERNAL_CLUSTER_URL = "rediss://:pw@clustercfg.rewards.abc123.use1.cache.amazonaws.com:6379"
EXTERNAL_SENTINEL_URL = "redis+sentinel://:pw@sentinel-a:26379,sentinel-b:26379/mymaster/0"

CASES: dict[str, dict[str, Any]] = {
    "cluster": {"redis": {"mode": "cluster"}},
    "cluster-sized": {
        "redis": {
            "mode": "cluster",
            "appendfsync": "always",
            "cluster": {
                "primaries": 4,
                "replicasPerPrimary": 2,
                "nodeTimeoutMs": 3000,
                "antiAffinity": "hard",
                "topologyKey": "topology.kubernetes.io/zone",
                "podDisruptionBudget": {"maxUnavailable": 2},
            },
        }
    },
    "external-cluster": {
        "redis": {"mode": "external", "external": {"mode": "cluster", "url": EXTERNAL_CLUSTER_URL}}
    },
    "external-cluster-secret": {
        "redis": {
            "mode": "external",
            "external": {"mode": "cluster", "existingSecret": "my-redis", "existingSecretKey": "url"},
        },
        "networkPolicy": {"externalRedisPorts": [6379, 11000]},
    },
    "external-standalone": {
        "redis": {"mode": "external", "external": {"url": "redis://redis.example:6379/0"}}
    },
    "external-sentinel": {
        "redis": {
            "mode": "external",
            "external": {
                "mode": "sentinel",
                "sentinel": {
                    "masterName": "mymaster",
                    "hosts": [
                        "redis-node-0.redis-headless.data.svc:26379",
                        "redis-node-1.redis-headless.data.svc",
                        "10.0.0.7:26380",
                    ],
                    "db": 2,
                    "passwordSecret": "redis",
                    "sentinelPasswordSecret": "redis",
                    "sentinelPasswordKey": "redis-sentinel-password",
                },
            },
        }
    },
    "external-sentinel-tls-nopassword": {
        "redis": {
            "external": {"mode": "sentinel", "sentinel": {"masterName": "m", "hosts": ["s"], "tls": True}}
        }
    },
    "external-sentinel-url": {
        "redis": {"mode": "external", "external": {"mode": "sentinel", "url": EXTERNAL_SENTINEL_URL}}
    },
}


@pytest.fixture(scope="module")
def chart() -> Any:
    with helm.Chart.load(CHART) as c:
        yield c


@pytest.fixture(scope="module")
def rendered(chart: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: render(values, chart=chart) for name, values in {"defaults": {}, **CASES}.items()}


def _container(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return one(objs, kind, name)["spec"]["template"]["spec"]["containers"][0]


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@pytest.mark.parametrize("case", list(CASES))
def test_case_lints_passes_schema_and_validates(chart: Any, rendered: dict[str, Any], case: str) -> None:
    report = helm.lint(CHART, CASES[case], namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    chart.validate_schema(CASES[case])
    objs = rendered[case]
    for obj in objs:
        validate(obj)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), "duplicate objects"


def test_cluster_statefulset_headless_service_and_pdb(rendered: dict[str, Any]) -> None:
    objs = rendered["cluster"]
    sts = one(objs, "StatefulSet", SVC)
    assert sts["spec"]["replicas"] == 6  # 3 primaries + 3 replicas
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    svc = one(objs, "Service", SVC)
    assert sts["spec"]["serviceName"] == SVC
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert _selects(svc["spec"]["selector"], pod_labels)
    c = sts["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"redis": 6379, "bus": 16379}  # the bus is the client port + 10000
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    pdb = one(objs, "PodDisruptionBudget", SVC)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert _selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    job = one(objs, "Job", JOB)
    assert not _selects(pdb["spec"]["selector"]["matchLabels"], job["spec"]["template"]["metadata"]["labels"])
    # the standalone Redis is not there; its name stays free, so switching modes replaces the store
    assert not find(objs, "StatefulSet", REDIS) and not find(objs, "Service", REDIS)
    assert len(find(objs, "StatefulSet")) == 1


def test_cluster_names_fit_with_the_longest_release_name(chart: Any) -> None:
    objs = render({"fullnameOverride": "r" * 40, "redis": {"mode": "cluster"}}, chart=chart)
    (sts,) = find(objs, "StatefulSet")
    name = sts["metadata"]["name"]
    assert len(f"{name}-{'h' * 10}") <= 63  # the pods' controller-revision-hash label
    assert len(f"{name}-{sts['spec']['replicas'] - 1}") <= 63  # pod names (DNS labels)
    (job,) = find(objs, "Job")
    assert len(job["metadata"]["name"]) <= 63  # the job-name label of its pods
    for o in objs:
        validate(o)


def test_cluster_nodes_run_aof_cluster_mode_and_announce_pod_names(rendered: dict[str, Any]) -> None:
    c = _container(rendered["cluster"], "StatefulSet", SVC)
    assert c["command"] == ["sh", "/scripts/start.sh"]
    args = c["args"]
    assert _arg(args, "--cluster-enabled") == "yes"
    assert _arg(args, "--appendonly") == "yes" and _arg(args, "--appendfsync") == "everysec"
    assert _arg(args, "--cluster-node-timeout") == "5000"
    assert _arg(args, "--cluster-config-file") == "/data/nodes.conf"
    assert _arg(args, "--cluster-announce-hostname") == f"$(POD_NAME).{SVC}.{NAMESPACE}.svc"
    assert _arg(args, "--cluster-preferred-endpoint-type") == "hostname"
    # replicas authenticate to their primaries with the same password clients use
    assert _arg(args, "--requirepass") == _arg(args, "--masterauth") == "$(REDIS_PASSWORD)"
    env = env_of(c)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": REDIS, "key": "redis-password"}}
    assert c["readinessProbe"]["exec"]["command"] == ["sh", "/scripts/ready.sh"]
    assert c["livenessProbe"]["tcpSocket"]["port"] == "redis"
    assert c["resources"]["limits"]["memory"] == "2Gi"

    sized = _container(rendered["cluster-sized"], "StatefulSet", SVC)
    assert one(rendered["cluster-sized"], "StatefulSet", SVC)["spec"]["replicas"] == 12
    assert _arg(sized["args"], "--appendfsync") == "always"
    assert _arg(sized["args"], "--cluster-node-timeout") == "3000"
    assert one(rendered["cluster-sized"], "PodDisruptionBudget", SVC)["spec"]["maxUnavailable"] == 2


def test_scripts_configmap_holds_the_chart_files(rendered: dict[str, Any]) -> None:
    objs = rendered["cluster"]
    sts = one(objs, "StatefulSet", SVC)
    vol = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "scripts")
    cm = one(objs, "ConfigMap", vol["configMap"]["name"])
    assert cm["data"] == {p.name: p.read_text() for p in sorted(SCRIPTS.glob("*.sh"))}
    assert set(cm["data"]) == {"start.sh", "ready.sh", "form.sh"}
    assert "checksum/scripts" in sts["spec"]["template"]["metadata"]["annotations"]  # changed scripts roll


def test_formation_job_is_an_idempotent_hook_over_every_node(rendered: dict[str, Any]) -> None:
    for case, nodes, replicas in (("cluster", "6", "1"), ("cluster-sized", "12", "2")):
        objs = rendered[case]
        job = one(objs, "Job", JOB)
        hooks = job["metadata"]["annotations"]
        assert set(hooks["helm.sh/hook"].split(",")) == {"post-install", "post-upgrade"}
        assert "before-hook-creation" in hooks["helm.sh/hook-delete-policy"]
        spec = job["spec"]["template"]["spec"]
        assert spec["restartPolicy"] == "Never"
        assert job["spec"]["activeDeadlineSeconds"] == 600
        c = spec["containers"][0]
        assert c["command"] == ["sh", "/scripts/form.sh"]
        env = env_of(c)
        assert (env["NODES"], env["REPLICAS"]) == (nodes, replicas)
        assert env["STATEFULSET"] == SVC and env["DOMAIN"] == f"{SVC}.{NAMESPACE}.svc"
        assert env["REDIS_PASSWORD"]["secretKeyRef"]["name"] == REDIS
        assert c["image"] == _container(objs, "StatefulSet", SVC)["image"]  # redis-cli of the same release
    form = (SCRIPTS / "form.sh").read_text()
    assert 'redis-cli --cluster create $addrs --cluster-replicas "$REPLICAS" --cluster-yes' in form
    assert "already formed; nothing to do" in form  # the second run changes nothing (pod tier proves it)


def test_anti_affinity_soft_by_default_hard_on_request_and_overridable(
    chart: Any, rendered: dict[str, Any]
) -> None:
    sts = one(rendered["cluster"], "StatefulSet", SVC)
    labels = sts["spec"]["template"]["metadata"]["labels"]
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (pref,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    term = pref["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert _selects(term["labelSelector"]["matchLabels"], labels)
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti

    sts = one(rendered["cluster-sized"], "StatefulSet", SVC)
    anti = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (req,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert req["topologyKey"] == "topology.kubernetes.io/zone"
    assert _selects(req["labelSelector"]["matchLabels"], labels)
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in anti

    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["redis"]}]}]}}}  # fmt: skip
    objs = render({"redis": {"mode": "cluster", "affinity": own}}, chart=chart)
    assert one(objs, "StatefulSet", SVC)["spec"]["template"]["spec"]["affinity"] == own


def test_cluster_pods_are_hardened_like_the_standalone_redis(rendered: dict[str, Any]) -> None:
    standalone = one(rendered["defaults"], "StatefulSet", REDIS)["spec"]["template"]["spec"]
    objs = rendered["cluster"]
    for kind, name in (("StatefulSet", SVC), ("Job", JOB)):
        spec = one(objs, kind, name)["spec"]["template"]["spec"]
        assert spec["securityContext"] == standalone["securityContext"], name
        assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
        for c in spec["containers"]:
            assert c["securityContext"] == standalone["containers"][0]["securityContext"], name
            assert c["resources"]["limits"]["memory"], name
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            assert mounts["/scripts"]["readOnly"] is True
            tmp = next(v for v in spec["volumes"] if v["name"] == mounts["/tmp"]["name"])
            assert "emptyDir" in tmp


def test_processes_get_cluster_mode_and_a_seed_url(rendered: dict[str, Any]) -> None:
    objs = rendered["cluster"]
    for dep in (f"{F}-proxy", f"{F}-planner"):
        c = _container(objs, "Deployment", dep)
        names = [e["name"] for e in c["env"]]
        env = env_of(c)
        assert env["DISTRS_REDIS_MODE"] == "cluster"
        # any node is a seed (the headless Service name resolves to all of them); no database number
        assert env["DISTRS_REDIS_URL"] == f"redis://:$(REDIS_PASSWORD)@{SVC}.{NAMESPACE}.svc:6379"
        assert names.index("REDIS_PASSWORD") < names.index("DISTRS_REDIS_URL")  # $(VAR) needs it first
    workers = [
        d
        for d in find(objs, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    ]
    assert len(workers) == 5  # four stages and the session pool
    for d in workers:  # workers talk to the proxy only
        env = env_of(d["spec"]["template"]["spec"]["containers"][0])
        assert not any(n.startswith("DISTRS_REDIS") for n in env)
    # standalone stays as it was: the store's default mode, db 0 of the one Redis
    for dep in (f"{F}-proxy", f"{F}-planner"):
        env = env_of(_container(rendered["defaults"], "Deployment", dep))
        assert "DISTRS_REDIS_MODE" not in env
        assert env["DISTRS_REDIS_URL"] == f"redis://:$(REDIS_PASSWORD)@{REDIS}.{NAMESPACE}.svc:6379/0"
    assert not find(rendered["defaults"], "Job") and not find(
        rendered["defaults"], "PodDisruptionBudget", SVC
    )


def _settings_declare_redis_mode() -> bool:
    from distrs.config import PlannerSettings, ProxySettings

    return all("redis_mode" in cls.model_fields for cls in (ProxySettings, PlannerSettings))


@pytest.mark.xfail(
    condition=not _settings_declare_redis_mode(),
    reason="DISTRS_REDIS_MODE is not a declared setting of this tree's distrs.config yet",
    strict=True,
)
def test_cluster_env_vars_are_real_settings(rendered: dict[str, Any]) -> None:
    """A DISTRS_* variable the settings do not declare would be silently ignored (extra=ignore)."""
    from distrs.config import PlannerSettings, ProxySettings, SessionSettings

    sessions = {f"DISTRS_SESSION_{n.upper()}" for n in SessionSettings.model_fields}
    allowed = {
        "proxy": {f"DISTRS_{n.upper()}" for n in ProxySettings.model_fields} | sessions,
        "planner": {f"DISTRS_{n.upper()}" for n in PlannerSettings.model_fields} | sessions,
    }
    for case in ("cluster", "external-cluster"):
        for component, settings in allowed.items():
            env = env_of(_container(rendered[case], "Deployment", f"{F}-{component}"))
            assert env["DISTRS_REDIS_MODE"] == "cluster"
            assert {n for n in env if n.startswith("DISTRS_")} <= settings, (case, component)


def test_external_cluster_uses_the_url_secret_and_no_redis_in_the_release(rendered: dict[str, Any]) -> None:
    objs = rendered["external-cluster"]
    assert not find(objs, "StatefulSet") and not find(objs, "Job") and not find(objs, "NetworkPolicy", REDIS)
    assert not find(objs, "Secret", REDIS)  # no password of ours: it is in the URL
    secret = one(objs, "Secret", f"{F}-redis-url")
    assert base64.b64decode(secret["data"]["redis-url"]).decode() == EXTERNAL_CLUSTER_URL
    for dep in (f"{F}-proxy", f"{F}-planner"):
        env = env_of(_container(objs, "Deployment", dep))
        assert env["DISTRS_REDIS_URL"] == {"secretKeyRef": {"name": f"{F}-redis-url", "key": "redis-url"}}
        assert env["DISTRS_REDIS_MODE"] == "cluster"
    objs = rendered["external-cluster-secret"]
    assert not find(objs, "Secret", f"{F}-redis-url")
    env = env_of(_container(objs, "Deployment", f"{F}-proxy"))
    assert env["DISTRS_REDIS_URL"] == {"secretKeyRef": {"name": "my-redis", "key": "url"}}
    egress = one(objs, "NetworkPolicy", f"{F}-proxy")["spec"]["egress"]
    assert {p["port"] for p in egress[0]["ports"]} == {6379, 11000}  # externalRedisPorts
    # an external standalone Redis gets the store's default mode, as before redis.mode existed
    env = env_of(_container(rendered["external-standalone"], "Deployment", f"{F}-proxy"))
    assert "DISTRS_REDIS_MODE" not in env and "secretKeyRef" in env["DISTRS_REDIS_URL"]


def test_network_policy_opens_the_bus_between_nodes_and_6379_to_clients(rendered: dict[str, Any]) -> None:
    objs = rendered["cluster"]
    np = one(objs, "NetworkPolicy", REDIS)["spec"]
    redis_labels = one(objs, "StatefulSet", SVC)["spec"]["template"]["metadata"]["labels"]
    assert _selects(np["podSelector"]["matchLabels"], redis_labels)
    job_labels = one(objs, "Job", JOB)["spec"]["template"]["metadata"]["labels"]
    clients, peers = np["ingress"]
    client_labels = [
        one(objs, "Deployment", f"{F}-{c}")["spec"]["template"]["metadata"]["labels"]
        for c in ("proxy", "planner")
    ] + [job_labels]
    for labels in client_labels:
        assert any(_selects(f["podSelector"]["matchLabels"], labels) for f in clients["from"])
    assert not any(_selects(f["podSelector"]["matchLabels"], redis_labels) for f in clients["from"])
    assert clients["ports"] == [{"protocol": "TCP", "port": 6379}]
    (peer,) = peers["from"]
    assert _selects(peer["podSelector"]["matchLabels"], redis_labels)
    assert {p["port"] for p in peers["ports"]} == {6379, 16379}
    to_peers, dns = np["egress"]
    assert _selects(to_peers["to"][0]["podSelector"]["matchLabels"], redis_labels)
    assert {p["port"] for p in to_peers["ports"]} == {6379, 16379}
    assert {p["port"] for p in dns["ports"]} == {53}
    # proxy and planner reach every node on 6379 (clients are sent to whichever holds a slot)
    for c in ("proxy", "planner"):
        egress = one(objs, "NetworkPolicy", f"{F}-{c}")["spec"]["egress"]
        rule = next(
            r
            for r in egress
            if any("podSelector" in t for t in r.get("to", [])) and r["ports"][0]["port"] == 6379
        )
        assert _selects(rule["to"][0]["podSelector"]["matchLabels"], redis_labels)
    # standalone keeps its Redis without egress
    assert one(rendered["defaults"], "NetworkPolicy", REDIS)["spec"]["egress"] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"mode": "external"}}, "redis.mode external needs redis.external.url"),
        ({"redis": {"mode": "cluster", "external": {"url": "redis://x:6379"}}}, "redis.mode cluster runs"),
        (
            {"redis": {"mode": "external", "external": {"mode": "cluster", "url": "redis://x:6379/0"}}},
            "redis.external.url: a Redis Cluster has only database 0",
        ),
    ],
)
def test_contradictory_modes_fail_with_a_message(chart: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message):
        render(values, chart=chart)


def _sentinel(**sentinel: Any) -> dict[str, Any]:
    return {"redis": {"mode": "external", "external": {"mode": "sentinel", "sentinel": sentinel}}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (_sentinel(hosts=["s:26379"]), "redis.external.sentinel.masterName is required"),
        (_sentinel(hosts=["s:26379"], masterName="a/b"), "redis.external.sentinel.masterName"),
        (_sentinel(hosts=["s:26379/x"], masterName="m"), r"redis.external.sentinel.hosts: \"s:26379/x\""),
        (_sentinel(hosts=["a:1,b:2"], masterName="m"), "is not host or host:port"),
        (_sentinel(), "redis.mode external needs"),
        (
            {"redis": {"external": {"mode": "sentinel", "url": "redis://s:6379/0"}}},
            "redis.external.url: with redis.external.mode sentinel the URL is redis\\+sentinel://",
        ),
        (
            {"redis": {"external": {"url": EXTERNAL_SENTINEL_URL}}},
            "names Sentinels .*: set redis.external.mode sentinel",
        ),
        (
            {"redis": {"external": {"sentinel": {"masterName": "m", "hosts": ["s"]}}}},
            "redis.external.sentinel.hosts is set: set redis.external.mode sentinel",
        ),
        (
            {
                "redis": {
                    "external": {
                        "mode": "sentinel",
                        "url": EXTERNAL_SENTINEL_URL,
                        "sentinel": {"masterName": "m", "hosts": ["s"]},
                    }
                }
            },
            "not both",
        ),
        (
            {
                "redis": {
                    "mode": "cluster",
                    "external": {"mode": "sentinel", "sentinel": {"masterName": "m", "hosts": ["s"]}},
                }
            },
            "redis.mode cluster runs",
        ),
    ],
)
def test_bad_sentinel_values_fail_naming_the_value(chart: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(Exception, match=message):
        render(values, chart=chart)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"redis": {"mode": "sentinel"}}, "mode"),
        ({"redis": {"external": {"mode": "sentinels"}}}, "mode"),
        ({"redis": {"external": {"sentinel": {"master": "m"}}}}, "master"),
        ({"redis": {"external": {"sentinel": {"db": -1}}}}, "db"),
        ({"redis": {"external": {"url": "sentinel://s:26379/m"}}}, "url"),
        ({"redis": {"cluster": {"primaries": 2}}}, "primaries"),
        ({"redis": {"cluster": {"replicasPerPrimary": -1}}}, "replicasPerPrimary"),
        ({"redis": {"cluster": {"antiAffinity": "maybe"}}}, "antiAffinity"),
        ({"redis": {"cluster": {"nodeTimeoutMs": 10}}}, "nodeTimeoutMs"),
        ({"networkPolicy": {"externalRedisPorts": []}}, "externalRedisPorts"),
    ],
)
def test_schema_rejects_bad_redis_values_naming_the_field(
    chart: Any, values: dict[str, Any], field: str
) -> None:
    with pytest.raises(helm.HelmValuesError) as err:
        chart.validate_schema(values)
    assert field in str(err.value)


def test_notes_tell_how_to_see_the_cluster_state(chart: Any) -> None:
    notes = chart.render({"redis": {"mode": "cluster"}}, name="rel", namespace=NAMESPACE)[
        "distrs/templates/NOTES.txt"
    ]
    assert f"Job {JOB}" in notes and f"exec {SVC}-0" in notes and "cluster info" in notes
    plain = chart.render({}, name="rel", namespace=NAMESPACE)["distrs/templates/NOTES.txt"]
    assert "Redis Cluster" not in plain


def test_external_sentinel_values_render_the_url_mode_and_passwords_the_store_reads(
    rendered: dict[str, Any],
) -> None:
    objs = rendered["external-sentinel"]
    assert not find(objs, "StatefulSet") and not find(objs, "Job") and not find(objs, "NetworkPolicy", REDIS)
    assert not find(objs, "Secret", REDIS) and not find(objs, "Secret", f"{F}-redis-url")
    hosts = "redis-node-0.redis-headless.data.svc:26379,redis-node-1.redis-headless.data.svc,10.0.0.7:26380"
    for dep in (f"{F}-proxy", f"{F}-planner"):
        c = _container(objs, "Deployment", dep)
        names = [e["name"] for e in c["env"]]
        env = env_of(c)
        assert env["DISTRS_REDIS_MODE"] == "sentinel"
        assert env["DISTRS_REDIS_URL"] == f"redis+sentinel://:$(REDIS_PASSWORD)@{hosts}/mymaster/2"
        assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "redis", "key": "redis-password"}}
        assert names.index("REDIS_PASSWORD") < names.index("DISTRS_REDIS_URL")  # $(VAR) needs it first
        assert env["DISTRS_REDIS_SENTINEL_PASSWORD"] == {
            "secretKeyRef": {"name": "redis", "key": "redis-sentinel-password"}
        }
    # the Sentinels' ports are opened next to the Redis nodes' (externalRedisPorts)
    for c in ("proxy", "planner"):
        egress = one(objs, "NetworkPolicy", f"{F}-{c}")["spec"]["egress"]
        ports = {p["port"] for r in egress if "to" not in r for p in r["ports"]}
        assert ports - {443, 6443} == {6379, 6380, 26379, 26380}, c  # (the planner's API server)

    env = env_of(_container(rendered["external-sentinel-tls-nopassword"], "Deployment", f"{F}-proxy"))
    assert env["DISTRS_REDIS_URL"] == "rediss+sentinel://s/m/0"
    assert "REDIS_PASSWORD" not in env and "DISTRS_REDIS_SENTINEL_PASSWORD" not in env

    objs = rendered["external-sentinel-url"]
    secret = one(objs, "Secret", f"{F}-redis-url")
    assert base64.b64decode(secret["data"]["redis-url"]).decode() == EXTERNAL_SENTINEL_URL
    env = env_of(_container(objs, "Deployment", f"{F}-planner"))
    assert env["DISTRS_REDIS_URL"] == {"secretKeyRef": {"name": f"{F}-redis-url", "key": "redis-url"}}
    assert env["DISTRS_REDIS_MODE"] == "sentinel"
    egress = one(objs, "NetworkPolicy", f"{F}-proxy")["spec"]["egress"]
    assert {p["port"] for r in egress if "to" not in r for p in r["ports"]} == {6379, 6380, 26379}


def test_the_sentinel_env_the_chart_renders_is_what_the_store_accepts(rendered: dict[str, Any]) -> None:
    """Every DISTRS_* variable is a declared setting, and the URL built from the values (with the
    password Kubernetes puts in) passes the store's own validation in sentinel mode."""
    from distrs.config import PlannerSettings, ProxySettings, SessionSettings
    from distrs.store.sentinel_url import parse_sentinel_url

    sessions = {f"DISTRS_SESSION_{n.upper()}" for n in SessionSettings.model_fields}
    for component, cls in (("proxy", ProxySettings), ("planner", PlannerSettings)):
        env = env_of(_container(rendered["external-sentinel"], "Deployment", f"{F}-{component}"))
        declared = {f"DISTRS_{n.upper()}" for n in cls.model_fields} | sessions
        assert {n for n in env if n.startswith("DISTRS_")} <= declared, component
        url = env["DISTRS_REDIS_URL"].replace("$(REDIS_PASSWORD)", "s3cret")
        settings = cls.model_validate(
            {"redis_url": url, "redis_mode": env["DISTRS_REDIS_MODE"], "redis_sentinel_password": "sp"}
        )
        target = parse_sentinel_url(settings.redis_url or "")
        assert target.master == "mymaster" and target.db == 2 and target.password == "s3cret"
        assert target.sentinels == (
            ("redis-node-0.redis-headless.data.svc", 26379),
            ("redis-node-1.redis-headless.data.svc", 26379),
            ("10.0.0.7", 26380),
        )
