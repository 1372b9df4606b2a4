"""Device topology graph G_D = (V_D, E_D, comp, mem, hbm, A, B) of HetRL App. B.1.

What: flattens a ``ClusterSpec`` into N devices with per-device compute (FLOP/s), memory
(bytes) and HBM bandwidth (bytes/s), plus the latency matrix A (seconds) and bandwidth
matrix B (bytes/s) between every pair of devices. Devices on the same node talk over the
intra-node fabric (``intra_gbps`` GB/s, ``INTRA_NODE_LATENCY_S``); devices on different nodes
use the network profile between their regions.

Why a separate object: every cost-model term is a function of these arrays, and the search
algorithms evaluate the cost model many thousands of times, so the matrices are built once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distrs.placement.specs import ClusterSpec, GpuType

INTRA_NODE_LATENCY_S = 5e-6


@dataclass(frozen=True)
class Device:
    index: int
    gpu: GpuType
    node: str
    node_index: int
    region: str
    zone: str
    local_rank: int


class Topology:
    """Immutable per-device attribute vectors and pairwise A (latency) / B (bandwidth)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        devices: list[Device] = []
        for ni, node in enumerate(cluster.nodes):
            gpu = cluster.gpu_types[node.gpu]
            for r in range(node.count):
                devices.append(Device(len(devices), gpu, node.name, ni, node.region, node.zone, r))
        self.devices: tuple[Device, ...] = tuple(devices)
        n = len(devices)
        self.n = n
        self.comp = np.array([d.gpu.tflops * 1e12 for d in devices])
        self.mem = np.array([d.gpu.memory_gb * 1e9 for d in devices])
        self.hbm = np.array([d.gpu.hbm_gbps * 1e9 for d in devices])
        self.price = np.array([d.gpu.price_per_hour for d in devices])
        self.node_of = np.array([d.node_index for d in devices])
        regions = sorted({d.region for d in devices})
        self.regions = regions
        self.region_of = np.array([regions.index(d.region) for d in devices])
        zones = sorted({(d.region, d.zone) for d in devices})
        self.zone_of = np.array([zones.index((d.region, d.zone)) for d in devices])
        types = list(cluster.gpu_types)
        self.type_names = types
        self.type_of = np.array([types.index(d.gpu.name) for d in devices])
        alpha = np.zeros((n, n))
        beta = np.full((n, n), np.inf)
        # Region-pair network figures are computed once per pair of nodes.
        nodes = cluster.nodes
        node_alpha = np.zeros((len(nodes), len(nodes)))
        node_beta = np.zeros((len(nodes), len(nodes)))
        for a, na in enumerate(nodes):
            for b, nb in enumerate(nodes):
                if a == b:
                    node_alpha[a, b] = INTRA_NODE_LATENCY_S
                    node_beta[a, b] = cluster.gpu_types[na.gpu].intra_gbps * 1e9
                else:
                    link = cluster.network.between(na.region, nb.region)
                    node_alpha[a, b] = link.latency_ms / 1e3
                    node_beta[a, b] = link.bandwidth_gbps * 1e9 / 8
        alpha = node_alpha[np.ix_(self.node_of, self.node_of)]
        beta = node_beta[np.ix_(self.node_of, self.node_of)]
        np.fill_diagonal(alpha, 0.0)
        np.fill_diagonal(beta, np.inf)
        self.alpha = alpha
        self.beta = beta
        self.node_alpha = node_alpha
        self.node_beta = node_beta

    def edge_cost(self, d: int, e: int, volume_bytes: float) -> float:
        """α_{d,d'} + cv/β_{d,d'} — the per-edge term inside every communication cost."""
        return float(self.alpha[d, e] + volume_bytes / self.beta[d, e])

    def gpus_per_node(self, d: int) -> int:
        return self.cluster.nodes[int(self.node_of[d])].count

    def price_per_hour(self, devices: list[int] | tuple[int, ...]) -> float:
        return float(self.price[list(devices)].sum()) if devices else 0.0
