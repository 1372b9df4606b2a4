"""The planner's Role grants exactly what the Kubernetes actuator calls (distrs.actuators.kubernetes).

``PERMISSIONS`` is the actuator's own list of its calls; tests/integration/k8s checks that the
actuator, driven through every path against the API stand-in, makes no call outside it.
"""

from __future__ import annotations

from distrs.actuators.kubernetes import PERMISSIONS, Permission
from tests.unit.helm.chart_render import find, one, render

F = "rel-distrs"


def granted(role: dict) -> set[Permission]:
    out = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add(Permission(group, resource, verb))
    return out


def test_role_grants_exactly_the_actuator_permissions() -> None:
    objs = render({"planner": {"replicas": 2}})
    role = one(objs, "Role", f"{F}-planner")
    assert granted(role) == set(PERMISSIONS)
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])
    assert find(objs, "ClusterRole") == [] and find(objs, "ClusterRoleBinding") == []


def test_names_are_pinned_where_rbac_allows() -> None:
    objs = render({"workers": {"stages": {"verify": {"enabled": False}}}})
    role = one(objs, "Role", f"{F}-planner")
    scale = [r for r in role["rules"] if r["resources"] == ["deployments/scale"]]
    assert scale[0]["resourceNames"] == [f"{F}-worker-{s}" for s in ("compile", "execute", "run", "sessions")]
    workers = {o["metadata"]["name"] for o in find(objs, "Deployment") if "-worker-" in o["metadata"]["name"]}
    assert set(scale[0]["resourceNames"]) == workers
    binding = one(objs, "RoleBinding", f"{F}-planner")
    planner = one(objs, "Deployment", f"{F}-planner")
    assert binding["subjects"][0]["name"] == planner["spec"]["template"]["spec"]["serviceAccountName"]


def test_no_rbac_objects_when_disabled() -> None:
    objs = render({"rbac": {"create": False}, "serviceAccount": {"name": "my-sa"}})
    assert find(objs, "Role") == [] and find(objs, "RoleBinding") == []
    planner = one(objs, "Deployment", f"{F}-planner")
    assert planner["spec"]["template"]["spec"]["serviceAccountName"] == "my-sa"


def test_no_workers_means_no_scale_grant_at_all() -> None:
    """An empty resourceNames list would mean *every* Deployment; the rule must go instead."""
    stages = {s: {"enabled": False} for s in ("compile", "execute", "run", "verify")}
    role = one(
        render({"workers": {"stages": stages}, "sessions": {"enabled": False}}), "Role", f"{F}-planner"
    )
    assert not [r for r in role["rules"] if "deployments/scale" in r["resources"]]
    only_sessions = one(render({"workers": {"stages": stages}}), "Role", f"{F}-planner")
    scale = [r for r in only_sessions["rules"] if "deployments/scale" in r["resources"]]
    assert scale[0]["resourceNames"] == [f"{F}-worker-sessions"]
