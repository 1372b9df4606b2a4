"""Espresso: least-cost heterogeneous GPU provisioning under an iteration-time SLO (Espresso §III).

Espresso provisions one training job; here the job is the workflow's policy update (actor
training over global_batch × responses sequences), and the SLO is ``slo_iteration_s`` (z = 1
iteration, so the cost of Eq. (1) is the price of one iteration).

* ``allocate`` — Algorithm 1, the cost-tree GPU allocator. For every DP size d (powers of two,
  boundary pruning) and PP size k in [k_lower, k_upper] (stages needed on the largest / smallest
  memory GPUs), a best-first search over partial plans N̂ — multisets of stage GPU types built
  type by type (lines 20-23, no duplicate orderings) — ordered by C_upper(N̂) of Eq. (4)
  (cheapest homogeneous completion, Eqs. (5)-(7)). Complete plans go to the stage placer and
  the cheapest one meeting the SLO is kept (lines 10-14). Pruning: time/capacity (TCP, line 16:
  remaining stages on the fastest type still miss the SLO, or on the largest-memory type still
  cannot hold the model) and cost (CP, line 18: lower-bound cost above the best plan so far).
* ``place_stages`` — Algorithm 2, the resource-aware stage placer: for every layer count of
  stage 0, stages are filled in order with the GPU type of minimum compute-memory ratio
  CMR(t, s) = F(t)/M(t) · α(t, s) (Eq. (10)), α = max(l_m, l_c)/l_c, with
  l = min(l_m^{t,s}, l_f^t) layers; ``AdjustToCoverAllLayers`` then adds the remaining layers
  to stages other than stage 0 while memory allows; the estimator (Eqs. (8)-(9)) picks the best.
* ``estimate`` — Eq. (9): T_iter = T_comp + max_i (T_comm_i − Σ_{j<i} T^b_j) with the 1F1B
  pipeline time T_comp = (m + k − 1)·max_i (T^f_i + T^b_i), the DP gradient all-reduce T_comm_i
  costed as a HetRL ring, and T^b_j the backward time of one micro-batch on stage j (the
  pipeline drain that hides later stages' communication).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass

from distrs.placement.costmodel import B_BF16, CostModel, cv_dp, layer_flops
from distrs.placement.plan import ACTOR_TRAIN

INF = float("inf")
FRAGMENTATION = 0.8  # β, the GPU memory fragmentation coefficient of the cost pruning
MAX_STAGES = 8


@dataclass(frozen=True)
class Stage:
    gpu_type: str
    layers: int
    devices: tuple[int, ...]


@dataclass(frozen=True)
class EspressoPlan:
    dp: int
    stages: tuple[Stage, ...]
    iteration_s: float
    price_per_hour: float

    @property
    def cost_per_iteration(self) -> float:
        """Eq. (1) with z = 1: T_iter × Σ c_t n_t (price per hour → per second)."""
        return self.iteration_s * self.price_per_hour / 3600.0

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.stages:
            out[s.gpu_type] = out.get(s.gpu_type, 0) + self.dp
        return out


@dataclass
class EspressoStats:
    expanded: int = 0
    complete: int = 0
    pruned_tcp: int = 0
    pruned_cp: int = 0
    search_s: float = 0.0


class Job:
    """The training job: per-layer FLOPs/memory, micro-batching and the cluster's GPU pools."""

    def __init__(self, cm: CostModel) -> None:
        self.cm = cm
        self.shape = cm.shape(ACTOR_TRAIN)
        self.seq = cm.wf.seq_in + cm.wf.seq_out
        self.samples = cm.wf.samples
        self.mbs = cm.opts.train_micro_batch
        self.flops_layer = layer_flops(self.shape, self.seq)  # forward, one sample
        gt = cm.topo.cluster.gpu_types
        self.types = [t for t in gt if any(n.gpu == t for n in cm.topo.cluster.nodes)]
        self.gpu = {t: gt[t] for t in self.types}
        self.quota = {t: sum(n.count for n in cm.topo.cluster.nodes if n.gpu == t) for t in self.types}
        self.pool = {t: [d for d in range(cm.topo.n) if cm.topo.devices[d].gpu.name == t] for t in self.types}

    def micro_batches(self, d: int) -> int:
        return max(1, math.ceil(self.samples / (self.mbs * d)))

    def fwd(self, t: str, layers: int) -> float:
        return self.mbs * layers * self.flops_layer / (self.gpu[t].tflops * 1e12)

    def stage_memory(self, layers: int, d: int, k: int, s: int, first_or_last: bool) -> float:
        params = layers * self.shape.params_per_layer + (
            self.shape.vocab * self.shape.hidden if first_or_last else 0
        )
        ckpt = B_BF16 * self.mbs * self.seq * self.shape.hidden * layers * (k - s)
        return (4.0 + 12.0 / d) * params + ckpt + 34.0 * self.mbs * self.seq * self.shape.hidden

    def max_layers(self, t: str, d: int, k: int, s: int) -> int:
        """l_m^{t,s}: most layers a stage s on type t can hold."""
        cap = self.cm.opts.memory_utilization * self.gpu[t].memory_gb * 1e9
        lo, hi = 0, self.shape.layers
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.stage_memory(mid, d, k, s, s in (0, k - 1)) <= cap:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def comm(self, devices: tuple[int, ...], layers: int, d: int) -> float:
        if d <= 1:
            return 0.0
        return self.cm.rings([self.cm.node[x] for x in devices], cv_dp(layers, self.shape, d, 1))

    def total_work(self) -> float:
        """W(l_total): forward + backward FLOPs of one iteration."""
        return 3.0 * self.samples * self.shape.layers * self.flops_layer


def _take_devices(job: Job, types: list[str], d: int) -> list[tuple[int, ...]] | None:
    pools = {t: list(p) for t, p in job.pool.items()}
    out = []
    for t in types:
        if len(pools[t]) < d:
            return None
        out.append(tuple(pools[t][:d]))
        pools[t] = pools[t][d:]
    return out


def estimate(job: Job, d: int, stages: list[tuple[str, int, tuple[int, ...]]]) -> float:
    """Eq. (9) iteration time of a stage placement (types, layers, devices per stage)."""
    k = len(stages)
    m = job.micro_batches(d)
    cap = {t: job.cm.opts.memory_utilization * job.gpu[t].memory_gb * 1e9 for t in job.types}
    per_mb = []
    back = []
    comm = []
    for s, (t, layers, devs) in enumerate(stages):
        if layers < 1 or job.stage_memory(layers, d, k, s, s in (0, k - 1)) > cap[t]:
            return INF
        f = job.fwd(t, layers)
        per_mb.append(3.0 * f)  # forward + backward (= 2× forward)
        back.append(2.0 * f)
        comm.append(job.comm(devs, layers, d))
    t_comp = (m + k - 1) * max(per_mb)
    exposed = max(comm[i] - sum(back[:i]) for i in range(k))
    return t_comp + max(0.0, exposed)


def place_stages(
    job: Job, d: int, types: list[str]
) -> tuple[float, list[tuple[str, int, tuple[int, ...]]]] | None:
    """Algorithm 2 (stagePlacer) for the stage GPU types ``types`` (a multiset) at DP size d."""
    k = len(types)
    total = job.shape.layers
    if k > total:
        return None
    gpu = job.gpu
    f_sum = sum(gpu[t].tflops for t in types)
    l_f = {
        t: max(1, round(total * gpu[t].tflops / f_sum)) for t in set(types)
    }  # load-balanced layers (line 3)
    l_max = max(job.max_layers(t, d, k, 0) for t in set(types))  # line 4
    best: tuple[float, list[tuple[str, int, tuple[int, ...]]]] | None = None
    per_layer_comm = {}
    for t in set(types):
        one = job.comm(tuple(job.pool[t][:d]), 1, d)
        two = job.comm(tuple(job.pool[t][:d]), 2, d)
        per_layer_comm[t] = (one - (two - one), max(1e-12, two - one))  # (α part, per-layer slope)
    for l_s0 in range(1, l_max + 1):  # line 5
        left = list(types)
        # stage 0: type of minimum CMR = F/M (no overlap budget yet, α = 1) (line 6)
        t0 = min(left, key=lambda t: (gpu[t].tflops / gpu[t].memory_gb, t))
        if job.max_layers(t0, d, k, 0) < l_s0:
            continue
        left.remove(t0)
        plan = [(t0, l_s0)]
        fixed, slope = per_layer_comm[t0]
        t_ol = fixed + slope * l_s0 if d > 1 else 0.0  # T_0^ol = T_comm of stage 0 (line 7)
        for s in range(1, k):  # line 8
            prev_t, prev_l = plan[-1]
            t_ol = 2.0 * job.fwd(prev_t, prev_l) + t_ol  # T_s^ol = T^b_{s-1} + T_{s-1}^ol (line 9)

            def cmr(t: str, s: int = s, t_ol: float = t_ol) -> float:  # Eq. (10) (line 10)
                l_m = job.max_layers(t, d, k, s)
                a, b = per_layer_comm[t]
                l_c = max(1, int((t_ol - a) / b)) if d > 1 else max(1, l_m)
                return gpu[t].tflops / gpu[t].memory_gb * (max(l_m, l_c) / l_c)

            t = min(left, key=lambda t: (cmr(t), t))  # line 11
            left.remove(t)
            plan.append((t, min(job.max_layers(t, d, k, s), l_f[t])))  # lines 12-13
        covered = _adjust_to_cover(job, d, plan)  # line 14
        if covered is None:
            continue
        plan = covered
        devs = _take_devices(job, [t for t, _ in plan], d)
        if devs is None:
            return None
        stages = [(t, nl, dv) for (t, nl), dv in zip(plan, devs, strict=True)]
        est = estimate(job, d, stages)  # line 15
        if est < INF and (best is None or est < best[0]):
            best = (est, stages)  # line 16
    return best


def _adjust_to_cover(job: Job, d: int, plan: list[tuple[str, int]]) -> list[tuple[str, int]] | None:
    """AdjustToCoverAllLayers: add missing layers one by one to stages ≠ 0 within memory, or
    take surplus layers off the last stages."""
    k = len(plan)
    total = job.shape.layers
    layers = [nl for _, nl in plan]
    while sum(layers) > total:
        i = max(range(1, k), key=lambda i: (layers[i], i)) if k > 1 else 0
        if layers[i] <= 1:
            return None
        layers[i] -= 1
    i = 1
    stuck = 0
    while sum(layers) < total:
        if k == 1:
            return None
        s = 1 + (i - 1) % (k - 1)
        i += 1
        if layers[s] + 1 <= job.max_layers(plan[s][0], d, k, s):
            layers[s] += 1
            stuck = 0
        else:
            stuck += 1
            if stuck > k:
                return None
    return [(t, nl) for (t, _), nl in zip(plan, layers, strict=True)]


def _homo_lower(job: Job, partial: list[str], t: str, k: int, d: int) -> tuple[float, float]:
    """HomoConfig(N̂, t): Eq. (5)-(7) iteration-time lower bound and cost with the remaining
    stages on type t; returns (T_lower, cost lower bound per iteration)."""
    types = partial + [t] * (k - len(partial))
    m = job.micro_batches(d)
    p = m / (m + k - 1)  # Eq. (6)
    rate = sum(d * job.gpu[x].tflops * 1e12 for x in types)
    t_lower = job.total_work() / (p * rate)  # Eq. (5)
    price = sum(d * job.gpu[x].price_per_hour for x in types)
    return t_lower, t_lower * price / 3600.0  # Eq. (7) with z = 1


def allocate(cm: CostModel, slo_s: float) -> tuple[EspressoPlan | None, EspressoStats]:
    """Algorithm 1: cheapest (allocation, stage placement) meeting the SLO."""
    t0 = time.perf_counter()
    job = Job(cm)
    stats = EspressoStats()
    types = sorted(job.types, key=lambda t: job.gpu[t].price_per_hour)
    best: EspressoPlan | None = None
    best_cost = INF
    x = sum(job.quota.values())
    d_upper = 2 ** math.ceil(math.log2(max(1, x)))  # BP: d in [2^0, 2^⌈log2 x⌉] (line 2)
    fastest = max(types, key=lambda t: job.gpu[t].tflops)
    roomiest = max(types, key=lambda t: job.gpu[t].memory_gb)
    smallest = min(types, key=lambda t: job.gpu[t].memory_gb)
    model_mem = job.stage_memory(job.shape.layers, 1, 1, 0, True)
    d = 1
    while d <= d_upper:
        # GetPPSizeRange (line 4): stages needed on the largest / smallest memory GPUs
        def stages_needed(t: str, d: int = d) -> int:
            for k in range(1, job.shape.layers + 1):
                if job.max_layers(t, d, k, 0) * k >= job.shape.layers:
                    return k
            return job.shape.layers + 1

        k_lower = stages_needed(roomiest)
        # k_upper: stages needed on the smallest-memory GPUs (BP), widened to what the quota
        # holds (up to MAX_STAGES) so that a tight SLO can be met with more, mixed GPUs
        k_upper = min(max(stages_needed(smallest), x // d), job.shape.layers, MAX_STAGES)
        for k in range(k_lower, k_upper + 1):  # line 5
            if k * d > x:
                break
            heap: list[tuple[float, int, tuple[str, ...], int]] = [
                (0.0, 0, (), 0)
            ]  # (C_upper, tie, N̂, next type)
            tie = itertools.count(1)
            while heap:  # line 7
                _, _, partial, ti = heapq.heappop(heap)  # line 8
                stats.expanded += 1
                s = len(partial)
                if s == k:  # lines 10-14
                    stats.complete += 1
                    placed = place_stages(job, d, list(partial))
                    if placed is None:
                        continue
                    est, stages = placed
                    if est > slo_s:
                        continue
                    price = sum(d * job.gpu[t].price_per_hour for t in partial)
                    cand = EspressoPlan(d, tuple(Stage(t, nl, dv) for t, nl, dv in stages), est, price)
                    if cand.cost_per_iteration < best_cost:
                        best, best_cost = cand, cand.cost_per_iteration
                    continue
                # pruneInfo (line 15): t_lower with the rest on the fastest type, m_max on the roomiest
                t_lower, _ = _homo_lower(job, list(partial), fastest, k, d)
                m_max = sum(job.gpu[t].memory_gb for t in partial) + (k - s) * job.gpu[roomiest].memory_gb
                if (
                    t_lower > slo_s or m_max * 1e9 * cm.opts.memory_utilization * d < model_mem
                ):  # TCP (line 16)
                    stats.pruned_tcp += 1
                    continue
                c_lower = (
                    min(_homo_lower(job, list(partial), t, k, d)[1] for t in types[ti:])
                    if ti < len(types)
                    else INF
                )
                if c_lower * FRAGMENTATION > best_cost:  # CP (line 18)
                    stats.pruned_cp += 1
                    continue
                if ti >= len(types):
                    continue
                t = types[ti]
                used = sum(1 for u in partial if u == t)
                room = (job.quota[t] - used * d) // d
                for y in range(0, min(k - s, room) + 1):  # lines 20-23
                    nxt = (*partial, *([t] * y))
                    if ti + 1 >= len(types) and len(nxt) < k:
                        continue
                    c_upper = min(_homo_lower(job, list(nxt), u, k, d)[1] for u in types)  # Eq. (4)
                    heapq.heappush(heap, (c_upper, next(tie), nxt, ti + 1))
        d *= 2
    stats.search_s = time.perf_counter() - t0
    return best, stats


def cheapest_homogeneous(cm: CostModel, slo_s: float) -> EspressoPlan | None:
    """Reference: the cheapest single-type plan (evenly split layers) that meets the SLO."""
    job = Job(cm)
    best: EspressoPlan | None = None
    for t in job.types:
        d = 1
        while d <= job.quota[t]:
            for k in range(1, min(job.shape.layers, job.quota[t] // d) + 1):
                base, extra = divmod(job.shape.layers, k)
                layers = [base + (1 if i < extra else 0) for i in range(k)]
                devs = _take_devices(job, [t] * k, d)
                if devs is None:
                    continue
                stages = [(t, nl, dv) for nl, dv in zip(layers, devs, strict=True)]
                est = estimate(job, d, stages)
                if est > slo_s:
                    continue
                cand = EspressoPlan(
                    d, tuple(Stage(t, nl, dv) for t, nl, dv in stages), est, k * d * job.gpu[t].price_per_hour
                )
                if best is None or cand.cost_per_iteration < best.cost_per_iteration:
                    best = cand
            d *= 2
    return best
