"""Cluster and workflow specifications for trainer placement.

What: typed, validated descriptions of (a) a heterogeneous GPU cluster — GPU types, nodes with
region/zone, and the network between regions — and (b) an RL training workflow (PPO/GRPO,
sync/async, model shapes, sequence lengths, batch). Both load from YAML (DESIGN.md "File
formats"); a cluster can also be built from Kubernetes node objects (plain dicts, e.g. the
``items`` of ``kubectl get nodes -o json``) plus a GPU catalogue and a network profile, so this
module never talks to a cluster itself.

Units (chosen so the HetRL Table 1 / AReaL-Hex §4.4 figures can be copied verbatim):
``tflops`` dense BF16/FP16 TFLOPS; ``memory_gb`` GB; ``hbm_gbps`` and ``intra_gbps`` are
GB/s (gigaBYTES per second, as in vendor sheets and HetRL Table 1); the network's
``bandwidth_gbps`` is Gbit/s (as networks are quoted) and ``latency_ms`` milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


class SpecError(ValueError):
    """A spec file or object is malformed; the message names the offending field."""


@dataclass(frozen=True)
class GpuType:
    """One GPU model (HetRL Table 1 columns plus a price)."""

    name: str
    tflops: float
    memory_gb: float
    hbm_gbps: float
    intra_gbps: float
    price_per_hour: float
    product: str = ""
    """Value of the ``nvidia.com/gpu.product`` node label; defaults to ``name``."""

    @property
    def product_label(self) -> str:
        return self.product or self.name


@dataclass(frozen=True)
class Node:
    """A machine holding ``count`` GPUs of one type."""

    name: str
    gpu: str
    count: int
    region: str
    zone: str = ""


@dataclass(frozen=True)
class Link:
    """Latency/bandwidth between two regions (symmetric)."""

    a: str
    b: str
    latency_ms: float
    bandwidth_gbps: float


@dataclass(frozen=True)
class LinkSpec:
    latency_ms: float
    bandwidth_gbps: float


@dataclass(frozen=True)
class NetworkProfile:
    """``default`` applies between nodes of one region and to region pairs without a link."""

    default: LinkSpec
    links: tuple[Link, ...] = ()

    def between(self, region_a: str, region_b: str) -> LinkSpec:
        if region_a != region_b:
            for link in self.links:
                if {link.a, link.b} == {region_a, region_b}:
                    return LinkSpec(link.latency_ms, link.bandwidth_gbps)
        else:
            for link in self.links:
                if link.a == link.b == region_a:
                    return LinkSpec(link.latency_ms, link.bandwidth_gbps)
        return self.default


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu_types: Mapping[str, GpuType]
    nodes: tuple[Node, ...]
    network: NetworkProfile

    @property
    def num_gpus(self) -> int:
        return sum(n.count for n in self.nodes)


@dataclass(frozen=True)
class ModelShape:
    """Transformer shape: h1 = hidden, h2 = intermediate (HetRL App. B.1 notation)."""

    layers: int
    hidden: int
    intermediate: int
    vocab: int = 0
    kv_hidden: int = 0
    """Width of one token's K (or V) per layer: kv_heads × head_dim (grouped-query attention);
    0 means multi-head attention (= hidden). Used for KV-cache size and traffic only."""

    @property
    def kv_width(self) -> int:
        return self.kv_hidden or self.hidden

    @property
    def params_per_layer(self) -> int:
        # 4·h1² (q,k,v,o projections) + 3·h1·h2 (gated MLP): the parameter count used by
        # every volume term in HetRL App. B.2 (cv_dp, C_hbm, cv_all-gather, cv_p2p).
        return 4 * self.hidden * self.hidden + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        return self.layers * self.params_per_layer + 2 * self.vocab * self.hidden


ModelRole = Literal["actor", "critic", "ref", "reward"]


@dataclass(frozen=True)
class WorkflowSpec:
    algorithm: Literal["ppo", "grpo"]
    mode: Literal["sync", "async"]
    models: Mapping[str, ModelShape]
    seq_in: int
    seq_out: int
    global_batch: int
    responses_per_prompt: int
    staleness: int = 1
    slo_iteration_s: float | None = None
    budget_per_hour: float | None = None
    name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        """Sequences per iteration (prompts x responses per prompt)."""
        return self.global_batch * self.responses_per_prompt

    def model(self, role: str) -> ModelShape:
        if role in self.models:
            return self.models[role]
        if role == "ref":  # the reference is a frozen copy of the actor (HetRL §2.1)
            return self.models["actor"]
        raise SpecError(f"models.{role}: missing")


# --------------------------------------------------------------------------- parsing helpers


def _num(obj: Mapping[str, Any], key: str, where: str, *, positive: bool = True) -> float:
    if key not in obj:
        raise SpecError(f"{where}.{key}: missing")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}.{key}: expected a number, got {value!r}")
    if positive and value <= 0:
        raise SpecError(f"{where}.{key}: must be > 0, got {value!r}")
    return float(value)


def _int(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = _num(obj, key, where)
    if value != int(value):
        raise SpecError(f"{where}.{key}: expected an integer, got {obj[key]!r}")
    return int(value)


def _mapping(obj: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SpecError(f"{where}: expected a mapping, got {type(obj).__name__}")
    return obj


def _link_spec(obj: Any, where: str) -> LinkSpec:
    m = _mapping(obj, where)
    return LinkSpec(_num(m, "latency_ms", where, positive=False), _num(m, "bandwidth_gbps", where))


def parse_network(obj: Any, where: str = "network") -> NetworkProfile:
    m = _mapping(obj, where)
    default = _link_spec(m.get("default"), f"{where}.default")
    links = []
    for i, raw in enumerate(m.get("links") or []):
        lw = f"{where}.links[{i}]"
        lm = _mapping(raw, lw)
        for key in ("a", "b"):
            if not isinstance(lm.get(key), str):
                raise SpecError(f"{lw}.{key}: expected a region name")
        spec = _link_spec(lm, lw)
        links.append(Link(lm["a"], lm["b"], spec.latency_ms, spec.bandwidth_gbps))
    return NetworkProfile(default, tuple(links))


def parse_gpu_types(obj: Any, where: str = "gpu_types") -> dict[str, GpuType]:
    m = _mapping(obj, where)
    if not m:
        raise SpecError(f"{where}: at least one GPU type is required")
    out: dict[str, GpuType] = {}
    for name, raw in m.items():
        gw = f"{where}.{name}"
        g = _mapping(raw, gw)
        out[str(name)] = GpuType(
            name=str(name),
            tflops=_num(g, "tflops", gw),
            memory_gb=_num(g, "memory_gb", gw),
            hbm_gbps=_num(g, "hbm_gbps", gw),
            intra_gbps=_num(g, "intra_gbps", gw),
            price_per_hour=_num(g, "price_per_hour", gw, positive=False),
            product=str(g.get("product", "")),
        )
    return out


def parse_cluster(obj: Any, name: str = "cluster") -> ClusterSpec:
    m = _mapping(obj, "cluster")
    gpu_types = parse_gpu_types(m.get("gpu_types"))
    raw_nodes = m.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise SpecError("nodes: expected a non-empty list")
    nodes = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        nw = f"nodes[{i}]"
        n = _mapping(raw, nw)
        node_name = n.get("name")
        if not isinstance(node_name, str) or not node_name:
            raise SpecError(f"{nw}.name: missing")
        if node_name in seen:
            raise SpecError(f"{nw}.name: duplicate node {node_name!r}")
        seen.add(node_name)
        gpu = n.get("gpu")
        if gpu not in gpu_types:
            raise SpecError(f"{nw}.gpu: unknown GPU type {gpu!r}")
        region = n.get("region")
        if not isinstance(region, str) or not region:
            raise SpecError(f"{nw}.region: missing")
        nodes.append(Node(node_name, str(gpu), _int(n, "count", nw), region, str(n.get("zone") or "")))
    return ClusterSpec(str(m.get("name") or name), gpu_types, tuple(nodes), parse_network(m.get("network")))


def parse_workflow(obj: Any, name: str = "workflow") -> WorkflowSpec:
    m = _mapping(obj, "workflow")
    algorithm = m.get("algorithm")
    if algorithm not in ("ppo", "grpo"):
        raise SpecError(f"algorithm: expected 'ppo' or 'grpo', got {algorithm!r}")
    mode = m.get("mode", "sync")
    if mode not in ("sync", "async"):
        raise SpecError(f"mode: expected 'sync' or 'async', got {mode!r}")
    raw_models = _mapping(m.get("models"), "models")
    models: dict[str, ModelShape] = {}
    for role, raw in raw_models.items():
        if role not in ("actor", "critic", "ref", "reward"):
            raise SpecError(f"models.{role}: unknown model role")
        mw = f"models.{role}"
        mm = _mapping(raw, mw)
        vocab = int(mm.get("vocab", 0) or 0)
        kv_hidden = int(mm.get("kv_hidden", 0) or 0)
        models[str(role)] = ModelShape(
            _int(mm, "layers", mw), _int(mm, "hidden", mw), _int(mm, "intermediate", mw), vocab, kv_hidden
        )
    if "actor" not in models:
        raise SpecError("models.actor: missing")
    if algorithm == "ppo" and "critic" not in models:
        raise SpecError("models.critic: PPO needs a critic")
    if algorithm == "grpo" and "critic" in models:
        raise SpecError("models.critic: GRPO has no critic")
    slo = m.get("slo_iteration_s")
    budget = m.get("budget_per_hour")
    return WorkflowSpec(
        algorithm=algorithm,
        mode=mode,
        models=models,
        seq_in=_int(m, "seq_in", "workflow"),
        seq_out=_int(m, "seq_out", "workflow"),
        global_batch=_int(m, "global_batch", "workflow"),
        responses_per_prompt=_int(m, "responses_per_prompt", "workflow"),
        staleness=int(m.get("staleness", 1) or 1),
        slo_iteration_s=None if slo is None else _num(m, "slo_iteration_s", "workflow"),
        budget_per_hour=None if budget is None else _num(m, "budget_per_hour", "workflow"),
        name=str(m.get("name") or name),
    )


def _load_yaml(path: str | Path) -> Any:
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{p}: not valid YAML: {exc}") from exc


def load_cluster(path: str | Path) -> ClusterSpec:
    return parse_cluster(_load_yaml(path), Path(path).stem)


def load_workflow(path: str | Path) -> WorkflowSpec:
    return parse_workflow(_load_yaml(path), Path(path).stem)


def cluster_from_k8s_nodes(
    nodes: Iterable[Mapping[str, Any]],
    gpu_types: Mapping[str, GpuType],
    network: NetworkProfile,
    name: str = "k8s",
) -> ClusterSpec:
    """Build a cluster from Kubernetes Node objects (as dicts).

    A node's GPU type is the catalogue entry whose ``product_label`` equals its
    ``nvidia.com/gpu.product`` label; the count comes from ``status.allocatable
    ["nvidia.com/gpu"]`` (or the ``nvidia.com/gpu.count`` label); the region from
    ``topology.kubernetes.io/region`` (falling back to the zone) and the zone from
    ``topology.kubernetes.io/zone``. Nodes without a GPU product label are skipped.
    """
    by_product = {g.product_label: g for g in gpu_types.values()}
    out = []
    for i, node in enumerate(nodes):
        meta = _mapping(node.get("metadata", {}), f"nodes[{i}].metadata")
        labels = meta.get("labels") or {}
        product = labels.get(GPU_PRODUCT_LABEL)
        if not product:
            continue
        if product not in by_product:
            raise SpecError(f"nodes[{i}].metadata.labels.{GPU_PRODUCT_LABEL}: unknown product {product!r}")
        alloc = ((node.get("status") or {}).get("allocatable") or {}).get("nvidia.com/gpu")
        count = int(alloc if alloc is not None else labels.get(GPU_COUNT_LABEL, 0))
        if count <= 0:
            continue
        zone = str(labels.get(ZONE_LABEL, ""))
        region = str(labels.get(REGION_LABEL) or zone or "default")
        out.append(Node(str(meta.get("name", f"node-{i}")), by_product[product].name, count, region, zone))
    if not out:
        raise SpecError("nodes: no node carries a known GPU product label")
    return ClusterSpec(name, dict(gpu_types), tuple(out), network)
