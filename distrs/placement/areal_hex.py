"""AReaL-Hex two-phase scheduler for asynchronous RL on heterogeneous GPUs (AReaL-Hex §4).

Algorithm 1 of the paper alternates two phases until max{C_T, C_I} is stable:

* Search phase (§4.2)
  - ``constrained_search(D_T)`` — training plan: TP and DP only within one GPU type (the
    paper's constraint); pipeline stages may span types, with transformer layers split in
    proportion to each stage's compute; every per-type (stages, DP, TP) combination and every
    order of the types along the pipeline is enumerated and the fastest kept (Metis-style).
  - ``rollout_milp(D_I)`` — rollout plan, Eq. (2): replica configurations ψ = (GPUs per type,
    per-stage TP) with TP inside one machine; h_ψ is the replica's token throughput from a
    HexGen-style cost (prefill FLOPs + HBM-bound decoding + TP/PP communication); y_ψ replicas,
    x_ψ rollouts each, makespan Θ. For fixed y the best continuous assignment is
    x_ψ ∝ y_ψ h_ψ, so minimising Θ = B·len / Σ y_ψ h_ψ is the integer program
    max Σ y_ψ h_ψ s.t. Σ_ψ i_t^ψ y_ψ ≤ i_t, solved with HiGHS (scipy.optimize.milp).
* Repartition phase (§4.3) — ``graph_partition(γ)``: bisect the GPU graph into D_T, D_I
  maximising Eq. (3) (share of interconnect bandwidth inside D_T + share of HBM bandwidth in
  D_I) with D_T's share of compute in [γ_L, γ_H] (here γ ± half the largest single-node
  share); a greedy construction followed by single-GPU moves between nodes (hill climbing).
  γ starts at 1 and is bisected on [q, r]: C_T < C_I ⇒ r = γ, else q = γ.

Costs are per training step over a window δ(η) = η + 1 steps (η = the workflow's staleness);
the window is doubled until the chosen plan's cost changes by less than 1%, as in §4.2. The
reward is rule-based (the DistRS service) so C_Reward = 0; C_Update is the HetRL C_sync of the
actor weights from the training GPUs to the rollout replicas. Throughput = tokens per step /
(max{C_T, C_I} + C_Update), the paper's §4.4 metric.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from distrs.placement.costmodel import (
    B_BF16,
    CostModel,
    balanced_split,
    comp_cost,
    cv_allgather,
    cv_dp,
    cv_pp,
    cv_tp,
    layer_flops,
    tp_cost,
)
from distrs.placement.plan import ACTOR_TRAIN, GEN

INF = float("inf")


@dataclass(frozen=True)
class TrainStage:
    gpu_type: str
    dp: int
    tp: int
    layers: int
    devices: tuple[int, ...]


@dataclass(frozen=True)
class TrainPlan:
    stages: tuple[TrainStage, ...]
    cost: float


@dataclass(frozen=True)
class RolloutConfig:
    """ψ: GPU type and TP of each pipeline stage (``per_type`` = v_ψ)."""

    stages: tuple[tuple[str, int], ...]
    throughput: float  # h_ψ, generated tokens/s of one replica

    @property
    def per_type(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for t, tp in self.stages:
            c[t] += tp
        return c


@dataclass
class RolloutPlan:
    replicas: list[tuple[RolloutConfig, int, int, tuple[int, ...]]]  # (ψ, y_ψ, x_ψ, GPUs)
    makespan: float


@dataclass
class ArealResult:
    train_devices: tuple[int, ...]
    rollout_devices: tuple[int, ...]
    train: TrainPlan
    rollout: RolloutPlan
    c_train: float
    c_infer: float
    c_update: float
    iteration_s: float
    throughput_tokens_s: float
    cost_per_hour: float
    iterations: int
    search_s: float
    gamma: float
    history: list[tuple[float, float, float]] = field(default_factory=list)


# ------------------------------------------------------------------------ search phase: training


def _type_options(n: int, max_tp: int, layers: int) -> list[tuple[int, int, int]]:
    """(stages, dp, tp) with stages·dp·tp = n for one GPU type."""
    out = []
    for tp in (1, 2, 4, 8):
        if tp > max_tp or n % tp:
            continue
        for stages in range(1, min(layers, n // tp) + 1):
            if (n // tp) % stages == 0:
                out.append((stages, n // tp // stages, tp))
    return out


def constrained_search(cm: CostModel, devices: tuple[int, ...], delta: int) -> TrainPlan | None:
    """Training plan for D_T (§4.2.1) and its δ-step-average cost C_T (per step)."""
    if not devices:
        return None
    topo = cm.topo
    shape = cm.shape(ACTOR_TRAIN)
    by_type: dict[str, list[int]] = {}
    for d in sorted(devices, key=lambda d: (int(topo.node_of[d]), d)):
        by_type.setdefault(topo.devices[d].gpu.name, []).append(d)
    types = list(by_type)
    max_tp = {t: min(8, max(n.count for n in topo.cluster.nodes if n.gpu == t)) for t in types}
    options = {t: _type_options(len(by_type[t]), max_tp[t], shape.layers) for t in types}
    best: TrainPlan | None = None
    samples = cm.wf.samples
    mbs = cm.opts.train_micro_batch
    seq = cm.wf.seq_in + cm.wf.seq_out
    flops = layer_flops(shape, seq)
    for order in itertools.permutations(types):
        for combo in itertools.product(*[options[t] for t in order]):
            stage_specs = []  # (type, dp, tp, devices)
            for t, (stages, dp, tp) in zip(order, combo, strict=True):
                devs = by_type[t]
                per = dp * tp
                for s in range(stages):
                    stage_specs.append((t, dp, tp, tuple(devs[s * per : (s + 1) * per])))
            if len(stage_specs) > shape.layers:
                continue
            # layers ∝ stage compute (dp·tp·TFLOPS), at least one each
            weights = [dp * tp * topo.cluster.gpu_types[t].tflops for t, dp, tp, _ in stage_specs]
            layers = balanced_split(shape.layers, weights)
            cost = _pipeline_cost(cm, stage_specs, layers, samples, mbs, flops)
            if cost < INF and (best is None or cost * delta < best.cost):
                best = TrainPlan(
                    tuple(
                        TrainStage(t, dp, tp, nl, devs)
                        for (t, dp, tp, devs), nl in zip(stage_specs, layers, strict=True)
                    ),
                    cost * delta,
                )
    if best is None:
        return None
    return TrainPlan(best.stages, best.cost / delta)


def _pipeline_cost(
    cm: CostModel, specs: list, layers: list[int], samples: int, mbs: int, flops: float
) -> float:  # type: ignore[type-arg]
    shape = cm.shape(ACTOR_TRAIN)
    seq = cm.wf.seq_in + cm.wf.seq_out
    per_mb = []
    totals = []
    dp_sync = 0.0
    for (_t, dp, tp, devs), nl in zip(specs, layers, strict=True):
        d0 = devs[0]
        # memory: BF16 weights+grads, optimizer sharded over DP, recompute checkpoints
        params = nl * shape.params_per_layer / tp
        need = (
            (4.0 + 12.0 / dp) * params
            + B_BF16 * mbs * seq * shape.hidden * nl * len(specs)
            + 34.0 * mbs * seq * shape.hidden / tp
        )
        if need > cm.opts.memory_utilization * cm.mem[d0]:
            return INF
        nm = max(1, math.ceil(samples / (mbs * dp)))
        ring = cm.rings([cm.node[d] for d in devs[:tp]], cv_tp(mbs, seq, shape.hidden, tp)) if tp > 1 else 0.0
        one = comp_cost(1, mbs, nl, flops, cm.comp[d0], tp, True) + tp_cost(1, nl, ring, True)
        per_mb.append(one)
        totals.append(nm * one)
        if dp > 1:
            group = [cm.node[devs[i * tp]] for i in range(dp)]
            dp_sync = max(dp_sync, cm.rings(group, cv_dp(nl, shape, dp, tp)))
    pp = 0.0
    nm_max = max(1, math.ceil(samples / (mbs * min(s[1] for s in specs))))
    for a, b in itertools.pairwise(specs):
        pp += 2 * cm.rings.min_pair(
            [cm.node[d] for d in a[3]], [cm.node[d] for d in b[3]], cv_pp(mbs, seq, shape.hidden)
        )
    # bottleneck stage streams its micro-batches; the others add one fill/drain micro-batch each
    bottleneck = max(range(len(totals)), key=lambda i: totals[i])
    fill = sum(per_mb[i] for i in range(len(per_mb)) if i != bottleneck)
    return totals[bottleneck] + fill + pp * nm_max / max(1, len(specs)) + dp_sync


# ------------------------------------------------------------------------ search phase: rollout


def rollout_configs(cm: CostModel, devices: tuple[int, ...]) -> list[RolloutConfig]:
    """Ψ: single-type replicas with PP ∈ {1, 2} and mixed two-type two-stage replicas, TP within a node."""
    topo = cm.topo
    shape = cm.shape(GEN)
    types = sorted({topo.devices[d].gpu.name for d in devices})
    node_size = {t: max(n.count for n in topo.cluster.nodes if n.gpu == t) for t in types}
    stage_choices = [(t, tp) for t in types for tp in (1, 2, 4, 8) if tp <= node_size[t]]
    candidates: list[tuple[tuple[str, int], ...]] = [(s,) for s in stage_choices]
    candidates += [(a, b) for a in stage_choices for b in stage_choices if a[0] <= b[0]]
    out = []
    for stages in candidates:
        h = _replica_throughput(cm, stages, shape.layers)
        if h > 0:
            out.append(RolloutConfig(stages, h))
    return out


def _replica_throughput(cm: CostModel, stages: tuple[tuple[str, int], ...], nl_total: int) -> float:
    """HexGen-style h_ψ: tokens/s of one replica decoding a full batch of rollouts."""
    topo = cm.topo
    shape = cm.shape(GEN)
    gt = topo.cluster.gpu_types
    weights = [gt[t].tflops * tp for t, tp in stages]
    if len(stages) > nl_total:
        return 0.0
    layers = balanced_split(nl_total, weights)
    seq = cm.wf.seq_in + cm.wf.seq_out
    # decode batch: KV cache fits in what the weights leave (kv_cache_fraction floor) on every stage
    dbs = cm.opts.max_decode_batch
    for (t, tp), nl in zip(stages, layers, strict=True):
        mem = gt[t].memory_gb * 1e9 * cm.opts.memory_utilization
        w = B_BF16 * nl * shape.params_per_layer / tp + B_BF16 * shape.vocab * shape.hidden / tp
        kv = 2 * B_BF16 * seq * nl * shape.kv_width / tp
        free = mem - w
        if free <= 0:
            return 0.0
        dbs = min(dbs, int(free // kv))
    if dbs < 1:
        return 0.0
    step = 0.0
    prefill = 0.0
    for (t, tp), nl in zip(stages, layers, strict=True):
        g = gt[t]
        w_bytes = B_BF16 * nl * shape.params_per_layer / tp
        # each decoding step also reads the KV cache of every sequence (mean context)
        kv_bytes = dbs * (cm.wf.seq_in + cm.wf.seq_out / 2) * 2 * B_BF16 * nl * shape.kv_width / tp
        flops_tok = 2.0 * nl * shape.params_per_layer / tp
        step += max((w_bytes + kv_bytes) / (g.hbm_gbps * 1e9), dbs * flops_tok / (g.tflops * 1e12))
        if tp > 1:
            step += 2 * nl * (1e-5 + B_BF16 * dbs * shape.hidden * 2 * (tp - 1) / tp / (g.intra_gbps * 1e9))
        prefill += dbs * layer_flops(shape, cm.wf.seq_in) * nl / (g.tflops * 1e12 * tp)
    if len(stages) == 2:
        # activations between the two stages (one hop on the network between their types)
        a = next(d for d in range(topo.n) if topo.devices[d].gpu.name == stages[0][0])
        b = [d for d in range(topo.n) if topo.devices[d].gpu.name == stages[1][0]][-1]
        step += topo.edge_cost(a, b, B_BF16 * dbs * shape.hidden)
    seconds = prefill + cm.wf.seq_out * step
    return dbs * cm.wf.seq_out / seconds


def rollout_milp(cm: CostModel, devices: tuple[int, ...], delta: int) -> RolloutPlan | None:
    """Eq. (2) with h_ψ from ``rollout_configs``; returns the per-step rollout time C_Rollout."""
    if not devices:
        return None
    from scipy.optimize import Bounds, LinearConstraint, milp

    topo = cm.topo
    configs = rollout_configs(cm, devices)
    if not configs:
        return None
    avail = Counter(topo.devices[d].gpu.name for d in devices)
    types = sorted(avail)
    a = np.array([[c.per_type.get(t, 0) for c in configs] for t in types], dtype=float)
    h = np.array([c.throughput for c in configs])
    ub = np.array(
        [min(avail[t] // max(1, c.per_type.get(t, 0)) for t in c.per_type) for c in configs], dtype=float
    )
    res = milp(
        c=-h,
        constraints=[LinearConstraint(a, -np.inf, np.array([avail[t] for t in types], dtype=float))],
        integrality=np.ones(len(configs)),
        bounds=Bounds(np.zeros(len(configs)), ub),
    )
    if res.x is None:
        return None
    y = np.round(res.x).astype(int)
    total_h = float((y * h).sum())
    if total_h <= 0:
        return None
    rollouts = cm.wf.samples * delta  # B: rollouts the replicas must produce in δ(η) steps
    length = cm.wf.seq_out  # len_rollout: expected generated tokens per rollout
    shares = [int(v) for v in np.floor(rollouts * y * h / total_h)]
    left = rollouts - sum(shares)
    for i in sorted(range(len(configs)), key=lambda i: -(y[i] * h[i])):
        if left <= 0:
            break
        if y[i] > 0:
            shares[i] += 1
            left -= 1
    makespan = max((shares[i] * length / (y[i] * h[i]) for i in range(len(configs)) if y[i] > 0), default=INF)
    # hand out concrete GPUs: TP groups within one node
    pools: dict[str, list[int]] = {}
    for d in sorted(devices, key=lambda d: (int(topo.node_of[d]), d)):
        pools.setdefault(topo.devices[d].gpu.name, []).append(d)
    replicas = []
    for i, c in enumerate(configs):
        if y[i] <= 0:
            continue
        gpus: list[int] = []
        for _ in range(int(y[i])):
            for t, tp in c.stages:
                gpus.extend(pools[t][:tp])
                pools[t] = pools[t][tp:]
        replicas.append((c, int(y[i]), shares[i], tuple(gpus)))
    return RolloutPlan(replicas, makespan / delta)


def weight_update(cm: CostModel, train: TrainPlan, rollout: RolloutPlan) -> float:
    """C_Update: HetRL C_sync from the training GPUs to the rollout replicas."""
    shape = cm.shape(ACTOR_TRAIN)
    nl = shape.layers
    t_devs = [d for s in train.stages for d in s.devices]
    replica = [d for s in train.stages for d in s.devices[: s.tp]]
    ag = (
        cm.rings([cm.node[d] for d in replica], cv_allgather(nl, shape, len(replica)))
        if len(replica) > 1
        else 0.0
    )
    bc = 0.0
    for c, y, _x, gpus in rollout.replicas:
        size = sum(tp for _, tp in c.stages)
        for r in range(y):
            grp = gpus[r * size : (r + 1) * size]
            if len(grp) > 1:
                bc = max(bc, cm.rings([cm.node[d] for d in grp], cv_allgather(nl, shape, len(grp))))
    r_devs = [d for _, _, _, g in rollout.replicas for d in g]
    p2p = cm.rings.min_pair(
        [cm.node[d] for d in t_devs], [cm.node[d] for d in r_devs], B_BF16 * nl * shape.params_per_layer
    )
    return ag + bc + p2p


# ------------------------------------------------------------------------ repartition phase


def ratio_partition(cm: CostModel, gamma: float) -> tuple[int, ...]:
    """Second candidate per γ: GPUs with the highest TFLOPS-to-HBM-bandwidth ratio go to
    training first (compute-bound), until D_T holds a γ share of the compute."""
    topo = cm.topo
    total = float(sum(cm.comp))
    order = sorted(range(topo.n), key=lambda d: (-cm.comp[d] / cm.hbm[d], int(topo.node_of[d]), d))
    out: list[int] = []
    acc = 0.0
    for d in order:
        if acc + cm.comp[d] / 2 > gamma * total:
            break
        out.append(d)
        acc += cm.comp[d]
    return tuple(sorted(out))


def graph_partition(cm: CostModel, gamma: float) -> tuple[int, ...]:
    """D_T maximising Eq. (3) with its compute share within γ ± half the largest node's share."""
    topo = cm.topo
    nodes = topo.cluster.nodes
    counts = [n.count for n in nodes]
    comp = [topo.cluster.gpu_types[n.gpu].tflops for n in nodes]
    hbm = [topo.cluster.gpu_types[n.gpu].hbm_gbps for n in nodes]
    beta = topo.node_beta
    total_c = sum(c * f for c, f in zip(counts, comp, strict=True))
    total_m = sum(c * m for c, m in zip(counts, hbm, strict=True))
    nn = len(nodes)
    total_b = sum(counts[a] * (counts[b] - (a == b)) * beta[a, b] for a in range(nn) for b in range(nn))
    width = 0.5 * max(f / total_c for f in comp) + 1e-9

    def objective(k: list[int]) -> float:
        bw = sum(k[a] * (k[b] - (a == b)) * beta[a, b] for a in range(nn) for b in range(nn) if k[a] and k[b])
        m = sum((counts[n] - k[n]) * hbm[n] for n in range(nn))
        return bw / total_b + m / total_m

    def share(k: list[int]) -> float:
        return sum(k[n] * comp[n] for n in range(nn)) / total_c

    def penalty(k: list[int]) -> float:
        return max(0.0, abs(share(k) - gamma) - width)

    # greedy: whole nodes by (intra bandwidth high, HBM low), then single GPUs, towards γ
    k = [0] * nn
    order = sorted(range(nn), key=lambda n: (-beta[n, n], hbm[n]))
    for n in order:
        while k[n] < counts[n] and share(k) + comp[n] / total_c <= gamma + width:
            k[n] += 1
    # hill climbing on single-GPU moves
    improved = True
    while improved:
        improved = False
        cur = (penalty(k), -objective(k))
        best_move = None
        for a in range(nn):
            for b in range(nn):
                for da, db in ((1, 0), (-1, 0), (1, -1)):
                    k2 = k[:]
                    k2[a] += da
                    if db:
                        k2[b] += db
                    if (a == b and db) or any(v < 0 or v > counts[i] for i, v in enumerate(k2)):
                        continue
                    val = (penalty(k2), -objective(k2))
                    if val < cur:
                        cur, best_move = val, k2
        if best_move is not None:
            k = best_move
            improved = True
    out: list[int] = []
    for n in range(nn):
        devs = [d for d in range(topo.n) if cm.node[d] == n]
        out.extend(devs[: k[n]])
    return tuple(out)


# ------------------------------------------------------------------------ Algorithm 1


def schedule(cm: CostModel, stable_iterations: int = 20, max_iterations: int = 60) -> ArealResult | None:
    t0 = time.perf_counter()
    eta = max(1, cm.wf.staleness)
    delta = eta + 1
    result = _bisect(cm, delta, stable_iterations, max_iterations)
    # adaptive δ(η): grow the window until the chosen plan's cost is stable (§4.2)
    for _ in range(3):
        if result is None:
            break
        bigger = _bisect(cm, delta * 2, stable_iterations, max_iterations)
        if bigger is None or abs(bigger.iteration_s - result.iteration_s) <= 0.01 * result.iteration_s:
            break
        delta *= 2
        result = bigger
    if result is not None:
        result.search_s = time.perf_counter() - t0
    return result


def _bisect(cm: CostModel, delta: int, stable_iterations: int, max_iterations: int) -> ArealResult | None:
    q, r = 0.0, 1.0
    gamma = 1.0  # γ_L = γ_H = 1: all FLOPS to training first
    best: ArealResult | None = None
    last, stable, it = None, 0, 0
    history = []
    seen: dict[tuple[int, ...], tuple[float, float, ArealResult | None]] = {}
    while it < max_iterations:
        it += 1
        # cost-guided: the Eq. (3) partition and the compute-ratio partition, cheaper one kept
        options = []
        for d_t in dict.fromkeys((graph_partition(cm, gamma), ratio_partition(cm, gamma))):
            if d_t not in seen:
                seen[d_t] = _evaluate_split(cm, d_t, delta, gamma)
            options.append(seen[d_t])
        c_t, c_i, res = min(options, key=lambda o: o[2].iteration_s if o[2] else max(o[0], o[1]))
        history.append((gamma, c_t, c_i))
        if res is not None and (best is None or res.iteration_s < best.iteration_s):
            best = res
        value = max(c_t, c_i)
        if last is not None and value != INF and abs(value - last) <= 1e-3 * max(1.0, last):
            stable += 1
        else:
            stable = 0
        last = value
        if stable >= stable_iterations or r - q < 1e-4:
            break
        # binary search on the training compute fraction (§4.3 "Iterative refinement")
        if c_t < c_i:
            r = gamma
        else:
            q = gamma
        gamma = (q + r) / 2
    if best is not None:
        best.iterations = it
        best.history = history
    return best


def _evaluate_split(
    cm: CostModel, d_t: tuple[int, ...], delta: int, gamma: float
) -> tuple[float, float, ArealResult | None]:
    topo = cm.topo
    d_i = tuple(d for d in range(topo.n) if d not in set(d_t))
    train = constrained_search(cm, d_t, delta)
    roll = rollout_milp(cm, d_i, delta)
    c_t = train.cost if train else INF
    c_i = roll.makespan if roll else INF
    if not (train and roll):
        return c_t, c_i, None
    upd = weight_update(cm, train, roll)
    iteration = max(c_t, c_i) + upd
    used = list(d_t) + [d for _, _, _, g in roll.replicas for d in g]
    res = ArealResult(
        d_t,
        d_i,
        train,
        roll,
        c_t,
        c_i,
        upd,
        iteration,
        cm.wf.samples * (cm.wf.seq_in + cm.wf.seq_out) / iteration,
        topo.price_per_hour(used),
        0,
        0.0,
        gamma,
    )
    return c_t, c_i, res
