"""Render a plan document into Kubernetes manifests: a KubeRay ``RayJob`` plus a ``ConfigMap``.

* one Ray worker group per GPU type, pinned with ``nodeSelector`` on the
  ``nvidia.com/gpu.product`` label, one pod per node the plan uses, each requesting the GPUs
  the plan uses on that node;
* custom Ray resources ``distrs_<group>`` on each worker group, counting the GPUs of that task
  group it holds, so each role's Ray actors land on the GPUs the plan gave it;
* the trainer entrypoint is verl's ``main_ppo`` with overrides for the parallel sizes of the
  actor, reference, critic and rollout workers, and the reward wired to the DistRS reward
  service (``DISTRS_REWARD_URL`` and verl's ``custom_reward_function`` hook);
* the ConfigMap carries the full plan JSON for the trainer and for operators.

Pure: returns dicts; writing YAML is the caller's business.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from typing import Any

from distrs.placement.plan import ACTOR_TRAIN, CRITIC_INF, CRITIC_TRAIN, GEN, REF_INF, REWARD_INF
from distrs.placement.specs import ClusterSpec

DEFAULT_IMAGE = "verlai/verl:latest"
REWARD_FN_PATH = "/opt/distrs/distrs_reward.py"


def _dns(name: str) -> str:
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return out[:50] or "x"


def _parallel(doc: dict[str, Any], task: str) -> dict[str, Any] | None:
    for g in doc["groups"]:
        if task in g["parallel"]:
            return g["parallel"][task]
    return None


def verl_overrides(doc: dict[str, Any], reward_url: str, nnodes: int, gpus_per_node: int) -> list[str]:
    wf = doc["workflow"]
    out = [
        f"algorithm.adv_estimator={'grpo' if wf['algorithm'] == 'grpo' else 'gae'}",
        "actor_rollout_ref.actor.strategy=megatron",
        f"trainer.nnodes={nnodes}",
        f"trainer.n_gpus_per_node={gpus_per_node}",
        f"custom_reward_function.path={REWARD_FN_PATH}",
        "custom_reward_function.name=compute_score",
        f"+distrs.reward_url={reward_url}",
    ]
    mapping = {
        ACTOR_TRAIN: "actor_rollout_ref.actor.megatron",
        REF_INF: "actor_rollout_ref.ref.megatron",
        CRITIC_TRAIN: "critic.megatron",
        CRITIC_INF: "critic.megatron",
        REWARD_INF: "reward_model.megatron",
    }
    done = set()
    for task, prefix in mapping.items():
        par = _parallel(doc, task)
        if par is None or prefix in done:
            continue
        done.add(prefix)
        out.append(f"{prefix}.tensor_model_parallel_size={par['tp']}")
        out.append(f"{prefix}.pipeline_model_parallel_size={par['pp']}")
        if par.get("layers") and par["pp"] > 1:
            out.append(f"+{prefix}.layer_split=[{','.join(str(x) for x in par['layers'])}]")
    gen = _parallel(doc, GEN)
    if gen is not None:
        out.append(f"actor_rollout_ref.rollout.tensor_model_parallel_size={gen['tp']}")
    if wf["mode"] == "async":
        out.append("+distrs.async_rollout=true")
    return out


def render(
    doc: dict[str, Any],
    cluster: ClusterSpec,
    reward_url: str,
    namespace: str = "default",
    image: str = DEFAULT_IMAGE,
    name: str | None = None,
) -> list[dict[str, Any]]:
    job = _dns(name or f"distrs-{doc['workflow']['name']}-{doc['algorithm']}")
    node_gpu = {n.name: n.gpu for n in cluster.nodes}
    # per GPU type: nodes used and GPUs used on each; per (type, group) GPU counts
    per_type_nodes: dict[str, Counter[str]] = defaultdict(Counter)
    per_type_group: dict[str, Counter[str]] = defaultdict(Counter)
    for g in doc["groups"]:
        for node, count in g["nodes"].items():
            t = node_gpu[node]
            per_type_nodes[t][node] += count
            per_type_group[t][_dns(g["name"])] += count
    groups = []
    for t, nodes in sorted(per_type_nodes.items()):
        gpu_type = cluster.gpu_types[t]
        per_pod = max(nodes.values())
        resources = {f"distrs_{grp.replace('-', '_')}": n for grp, n in sorted(per_type_group[t].items())}
        template = {
            "metadata": {"labels": {"app.kubernetes.io/name": job, "distrs.io/gpu-type": _dns(t)}},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": gpu_type.product_label},
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": image,
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(per_pod)},
                            "requests": {"nvidia.com/gpu": str(per_pod)},
                        },
                        "env": [{"name": "DISTRS_REWARD_URL", "value": reward_url}],
                    }
                ],
            },
        }
        groups.append(
            {
                "groupName": _dns(f"gpu-{t}"),
                "replicas": len(nodes),
                "minReplicas": len(nodes),
                "maxReplicas": len(nodes),
                "rayStartParams": {"num-gpus": str(per_pod), "resources": json.dumps(resources)},
                "template": template,
            }
        )
    nnodes = sum(len(n) for n in per_type_nodes.values())
    gpus_per_node = max((max(n.values()) for n in per_type_nodes.values()), default=1)
    overrides = verl_overrides(doc, reward_url, nnodes, gpus_per_node)
    head = {
        "metadata": {"labels": {"app.kubernetes.io/name": job, "distrs.io/role": "head"}},
        "spec": {
            "containers": [
                {
                    "name": "ray-head",
                    "image": image,
                    "resources": {
                        "limits": {"cpu": "8", "memory": "32Gi"},
                        "requests": {"cpu": "4", "memory": "16Gi"},
                    },
                    "env": [{"name": "DISTRS_REWARD_URL", "value": reward_url}],
                    "volumeMounts": [{"name": "plan", "mountPath": "/etc/distrs"}],
                }
            ],
            "volumes": [{"name": "plan", "configMap": {"name": f"{job}-plan"}}],
        },
    }
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": job, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "distrs"}},
        "spec": {
            "entrypoint": "python3 -m verl.trainer.main_ppo " + " ".join(overrides),
            "runtimeEnvYAML": "env_vars:\n  DISTRS_REWARD_URL: "
            + json.dumps(reward_url)
            + "\n  DISTRS_PLAN: /etc/distrs/plan.json\n",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "rayVersion": "2.40.0",
                "headGroupSpec": {"rayStartParams": {"num-gpus": "0"}, "template": head},
                "workerGroupSpecs": groups,
            },
        },
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{job}-plan",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "distrs"},
        },
        "data": {"plan.json": json.dumps(doc, indent=2, sort_keys=True)},
    }
    return [config, rayjob]


def pod_templates(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod templates inside a RayJob as standalone ``v1/PodTemplate`` objects, so they can
    be schema-checked (RayJob is a custom resource without a bundled schema)."""
    out = []
    for m in manifests:
        if m.get("kind") != "RayJob":
            continue
        spec = m["spec"]["rayClusterSpec"]
        templates = [("head", spec["headGroupSpec"]["template"])] + [
            (g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]
        ]
        for name, tpl in templates:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": f"{m['metadata']['name']}-{name}"[:63]},
                    "template": tpl,
                }
            )
    return out
