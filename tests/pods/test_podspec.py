"""The pod-template -> `podman run` translation, checked on the rendered chart (no containers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pods import podspec
from tests.pods.cluster import install_seccomp_profiles
from tests.unit.helm.chart_render import find, render


def cluster(tmp_path: Path, objs: list[dict[str, Any]]) -> podspec.Cluster:
    (tmp_path / "default.json").write_text("{}")
    (tmp_path / "root" / "distrs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "root" / "distrs" / "sandbox.json").write_text("{}")
    for o in objs:  # the chart's own profile, where its installer would put it
        if o["kind"] == "ConfigMap" and (o["metadata"].get("labels") or {}).get("distrs.io/seccomp-profiles"):
            for key, text in o["data"].items():
                (tmp_path / "root" / "distrs" / key).write_text(text)
    return podspec.Cluster(
        namespace="rewards",
        secrets={o["metadata"]["name"]: podspec.secret_data(o) for o in objs if o["kind"] == "Secret"},
        configmaps={
            o["metadata"]["name"]: podspec.configmap_data(o) for o in objs if o["kind"] == "ConfigMap"
        },
        runtime_default_seccomp=tmp_path / "default.json",
        seccomp_root=tmp_path / "root",
        volume_root=tmp_path / "vol",
        network="net",
        hosts={"svc": "10.0.0.2"},
    )


def pod(objs: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    (d,) = [o for o in find(objs, "Deployment") if o["metadata"]["name"].endswith(suffix)]
    return d["spec"]["template"]["spec"]


def opt(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}
    assert podspec.expand("$(A)-$(B)", env) == "x-y"
    assert podspec.expand("$$(A)", env) == "$(A)"  # escaped
    assert podspec.expand("$(UNKNOWN)", env) == "$(UNKNOWN)"  # left as is


def test_worker_pod_gets_the_rendered_security_context_env_and_volumes(tmp_path: Path) -> None:
    objs = render(
        {
            "workers": {
                "defaults": {
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "distrs/sandbox.json"}
                }
            }
        }
    )
    c = cluster(tmp_path, objs)
    plan = podspec.plan_pod("w-1", pod(objs, "worker-compile"), None, c, "10.0.0.9")
    a = plan.args
    assert opt(a, "--user") == ["10001:10001"] and opt(a, "--group-add") == ["10001"]
    assert opt(a, "--cap-drop") == ["all"] and "--read-only" in a and "--read-only-tmpfs=false" in a
    assert "no-new-privileges" in opt(a, "--security-opt")
    assert f"seccomp={tmp_path}/root/distrs/sandbox.json" in opt(a, "--security-opt")
    auth = next(v for k, v in c.secrets.items() if k.endswith("-auth"))
    assert plan.env["DISTRS_TOKEN"] == auth["worker-token"].decode()  # secretKeyRef
    assert plan.env["DISTRS_WORKER_ID"] == "w-1"  # fieldRef metadata.name
    assert opt(a, "--entrypoint")[0].startswith('["distrs", "worker", "--stage", "compile"')
    assert f"{tmp_path}/vol/scratch:/scratch:rw" in opt(a, "--volume")
    assert opt(a, "--add-host") == ["svc:10.0.0.2"] and opt(a, "--ip") == ["10.0.0.9"]


def test_proxy_redis_url_expands_the_password_from_its_secret(tmp_path: Path) -> None:
    objs = render({})
    c = cluster(tmp_path, objs)
    plan = podspec.plan_pod("p-1", pod(objs, "-proxy"), None, c, "10.0.0.3")
    pw = next(v for k, v in c.secrets.items() if k.endswith("-redis"))["redis-password"].decode()
    assert plan.env["DISTRS_REDIS_URL"].startswith(f"redis://:{pw}@")
    assert f"seccomp={tmp_path}/default.json" in opt(plan.args, "--security-opt")  # RuntimeDefault


def test_what_cannot_be_emulated_is_refused(tmp_path: Path) -> None:
    objs = render({"workers": {"defaults": {"runtimeClassName": "gvisor"}}})
    with pytest.raises(podspec.Unsupported, match="runtimeClassName 'gvisor'"):
        podspec.plan_pod("w", pod(objs, "worker-compile"), None, cluster(tmp_path, objs), "10.0.0.9")
    objs = render(
        {
            "workers": {
                "defaults": {"seccompProfile": {"type": "Localhost", "localhostProfile": "missing.json"}}
            }
        }
    )
    with pytest.raises(podspec.Unsupported, match=r"missing\.json is not installed"):
        podspec.plan_pod("w", pod(objs, "worker-compile"), None, cluster(tmp_path, objs), "10.0.0.9")


def test_host_users_false_maps_the_pod_into_a_user_namespace(tmp_path: Path) -> None:
    objs = render({})
    spec = dict(pod(objs, "worker-compile"), hostUsers=False)
    plan = podspec.plan_pod("w", spec, None, cluster(tmp_path, objs), "10.0.0.9", userns_base=300_000)
    assert opt(plan.args, "--uidmap") == ["0:300000:65536"] and opt(plan.args, "--gidmap") == [
        "0:300000:65536"
    ]


def test_labelled_configmaps_fill_the_kubelet_seccomp_root(tmp_path: Path) -> None:
    cm: dict[str, Any] = {
        "kind": "ConfigMap",
        "metadata": {"name": "p", "labels": {"distrs.io/seccomp-profiles": "true"}},
        "data": {"jail.json": '{"defaultAction": "SCMP_ACT_ALLOW"}'},
    }
    other = {"kind": "ConfigMap", "metadata": {"name": "q"}, "data": {"x.json": "{}"}}
    (tmp_path / "admin.json").write_text("{}")
    install_seccomp_profiles([cm, other], tmp_path / "root", {"node/admin.json": tmp_path / "admin.json"})
    assert (tmp_path / "root/distrs/jail.json").read_text() == cm["data"]["jail.json"]
    assert not (tmp_path / "root/distrs/x.json").exists()
    assert (tmp_path / "root/node/admin.json").exists()
