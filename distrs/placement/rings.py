"""Ring min-max: min over rings r of max over edges e in r of (α_e + cv/β_e).

Every collective in HetRL App. B.2 (TP all-reduce, DP all-reduce, resharding all-gather,
weight-sync broadcast) is costed by the slowest edge of the best ring through its devices,
``min_{r ∈ ring(G_D)} max_{e ∈ r} (α + cv/β)``. That is a bottleneck travelling-salesman
problem. Devices on one node are interchangeable, so the cost depends only on how many of the
ring's devices sit on each node; results are cached per (node multiset, volume).

* ``n ≤ EXACT_MAX_DEVICES``: exact, by a bottleneck Held-Karp recursion over device subsets.
* larger rings: the better of two feasible rings —
  (a) the *hierarchical* ring (devices of a node contiguous, nodes of a region contiguous,
  regions in the cyclic order with the smallest bottleneck; exhaustive over orders for up to
  eight regions, nearest-neighbour beyond), and
  (b) the *tree walk*: an Euler tour of the bottleneck spanning tree over nodes, feasible when
  each node holds at least as many devices as its tree degree. The spanning-tree bottleneck is
  a lower bound on any ring, so whenever (b) is feasible the result is exact.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

EXACT_MAX_DEVICES = 7


def _edge(
    node_alpha: Sequence[Sequence[float]], node_beta: Sequence[Sequence[float]], a: int, b: int, vol: float
) -> float:
    return node_alpha[a][b] + vol / node_beta[a][b]


def ring_exact(
    nodes: Sequence[int],
    node_alpha: Sequence[Sequence[float]],
    node_beta: Sequence[Sequence[float]],
    vol: float,
) -> float:
    """Bottleneck Hamiltonian cycle over devices (given by their node ids), exactly."""
    n = len(nodes)
    if n <= 1:
        return 0.0
    cost = [[_edge(node_alpha, node_beta, nodes[i], nodes[j], vol) for j in range(n)] for i in range(n)]
    if n == 2:
        return cost[0][1]
    full = (1 << n) - 1
    inf = float("inf")
    # best[mask][last] = smallest bottleneck of a path 0 -> ... -> last visiting mask.
    best = [[inf] * n for _ in range(1 << n)]
    best[1][0] = 0.0
    for mask in range(1, 1 << n):
        if not mask & 1:
            continue
        row = best[mask]
        for last in range(n):
            cur = row[last]
            if cur == inf or not mask >> last & 1:
                continue
            for nxt in range(1, n):
                if mask >> nxt & 1:
                    continue
                val = max(cur, cost[last][nxt])
                nm = mask | 1 << nxt
                if val < best[nm][nxt]:
                    best[nm][nxt] = val
    return min(max(best[full][last], cost[last][0]) for last in range(1, n))


def _hierarchical(
    counts: Counter[int],
    region_of_node: Sequence[int],
    node_alpha: Sequence[Sequence[float]],
    node_beta: Sequence[Sequence[float]],
    vol: float,
) -> float:
    worst = 0.0
    for node, c in counts.items():
        if c >= 2:
            worst = max(worst, _edge(node_alpha, node_beta, node, node, vol))
    by_region: dict[int, list[int]] = {}
    for node in counts:
        by_region.setdefault(region_of_node[node], []).append(node)
    reps = []
    for nodes in by_region.values():
        nodes.sort()
        for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
            if a != b:
                worst = max(worst, _edge(node_alpha, node_beta, a, b, vol))
        reps.append(nodes[0])
    if len(reps) == 1:
        return worst
    if len(reps) == 2:
        return max(worst, _edge(node_alpha, node_beta, reps[0], reps[1], vol))
    first, rest = reps[0], reps[1:]
    best = float("inf")
    if len(reps) <= 8:
        for perm in itertools.permutations(rest):
            cyc = (first, *perm)
            worst_edge = max(
                _edge(node_alpha, node_beta, cyc[i], cyc[(i + 1) % len(cyc)], vol) for i in range(len(cyc))
            )
            best = min(best, worst_edge)
    else:  # nearest neighbour on the bottleneck edge
        order = [first]
        left = set(rest)
        while left:
            cur = order[-1]
            nxt = min(left, key=lambda r: _edge(node_alpha, node_beta, cur, r, vol))
            order.append(nxt)
            left.remove(nxt)
        best = max(
            _edge(node_alpha, node_beta, order[i], order[(i + 1) % len(order)], vol)
            for i in range(len(order))
        )
    return max(worst, best)


def _tree_walk(
    counts: Counter[int],
    node_alpha: Sequence[Sequence[float]],
    node_beta: Sequence[Sequence[float]],
    vol: float,
) -> float:
    nodes = list(counts)
    worst = 0.0
    for node, c in counts.items():
        if c >= 2:
            worst = max(worst, _edge(node_alpha, node_beta, node, node, vol))
    # Prim's algorithm yields a minimum spanning tree, which is also a bottleneck tree.
    in_tree = {nodes[0]}
    degree: Counter[int] = Counter()
    while len(in_tree) < len(nodes):
        cand = min(
            (
                (_edge(node_alpha, node_beta, a, b, vol), a, b)
                for a in in_tree
                for b in nodes
                if b not in in_tree
            ),
        )
        w, a, b = cand
        worst = max(worst, w)
        degree[a] += 1
        degree[b] += 1
        in_tree.add(b)
    if len(nodes) == 2:  # a two-node ring crosses the single edge twice: needs no extra visits
        return worst
    if all(degree[v] <= counts[v] for v in nodes):
        return worst
    return float("inf")


class RingCoster:
    """Cached ring min-max for one topology (node-level latency/bandwidth matrices)."""

    def __init__(
        self,
        node_alpha: Sequence[Sequence[float]],
        node_beta: Sequence[Sequence[float]],
        region_of_node: Sequence[int],
    ) -> None:
        self.node_alpha = [list(r) for r in node_alpha]
        self.node_beta = [list(r) for r in node_beta]
        self.region_of_node = list(region_of_node)
        self._cache: dict[tuple[tuple[tuple[int, int], ...], float], float] = {}

    def __call__(self, device_nodes: Sequence[int], vol: float) -> float:
        if len(device_nodes) <= 1:
            return 0.0
        counts = Counter(device_nodes)
        key = (tuple(sorted(counts.items())), vol)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if len(device_nodes) <= EXACT_MAX_DEVICES:
            val = ring_exact(sorted(device_nodes), self.node_alpha, self.node_beta, vol)
        elif len(counts) == 1:
            node = next(iter(counts))
            val = _edge(self.node_alpha, self.node_beta, node, node, vol)
        else:
            val = min(
                _hierarchical(counts, self.region_of_node, self.node_alpha, self.node_beta, vol),
                _tree_walk(counts, self.node_alpha, self.node_beta, vol),
            )
        if len(self._cache) > 500_000:
            self._cache.clear()
        self._cache[key] = val
        return val

    def min_pair(self, nodes_a: Sequence[int], nodes_b: Sequence[int], vol: float) -> float:
        """min over d in A, d' in B of α + cv/β (PP and point-to-point terms)."""
        return min(
            _edge(self.node_alpha, self.node_beta, a, b, vol) for a in set(nodes_a) for b in set(nodes_b)
        )
