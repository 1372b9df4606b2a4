"""HetRL analytical cost model (HetRL Appendix B) plus memory feasibility (constraint C3).

What: given a plan, a topology and a workflow, estimate the iteration time of synchronous or
asynchronous PPO/GRPO on heterogeneous GPUs and networks. Each function below is one equation
of App. B and says which; ``evaluate`` composes them into the end-to-end formulas of B.4.

Choices where the paper leaves room (each is documented in docs/placement.md):

* Units: FLOPs / (TFLOPS·1e12); bytes / (bytes/s). B_BF16 = 2 bytes.
* Ψ^gen / Ψ^inf in B.3 leave the index j of C_pp/C_hbm free outside the inner max; we read it as
  the maximum over stages (the same max that defines C_pp^t and C_hbm^t).
* Φ (B.4) is applied per task group: tasks in different groups run on disjoint GPUs and
  overlap fully (η = 1); tasks sharing a group overlap with ``eta_colocated`` (default 0, i.e.
  run one after another as in verl's colocated engine). With one group this is the paper's Φ.
* Synchronous RL pays C_reshard when generation and actor training share GPUs, and the weight
  synchronisation C_sync of B.2 when they do not (weights must then move between groups).
  Asynchronous RL requires the generation task to have its own group (two model copies, §2.1).
* The GRPO formulas of B.4 write C^6 (critic training) for the training term; GRPO has no
  critic, so the actor-training cost C^5 is used.
* Training uses activation recomputation (TP factor 6, App. B.2) and 3× forward FLOPs.
* Data-level load balancing (§4.2): a task's samples are split across its DP replicas in
  proportion to their speed; layer-level balancing: layers are split across pipeline stages in
  proportion to each stage's slowest GPU. Either can be given explicitly in the plan instead.
* Memory (C3): per device, Σ model memory of its tasklets + the largest working memory.
  Training: 4 B/param BF16 weights+grads plus 12 B/param FP32 master+Adam sharded over DP
  (distributed optimizer) and recomputation checkpoints;
  inference: 2 B/param + activations; generation: 2 B/param (0 when it shares GPUs with the
  actor training in sync mode: the engine reshards the training weights) + KV cache of the
  decoding batch. The decoding batch dbs_d is what fits in ``kv_cache_fraction`` of memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from distrs.placement.plan import (
    ACTOR_TRAIN,
    CRITIC_INF,
    CRITIC_TRAIN,
    GEN,
    REF_INF,
    REWARD_INF,
    TASK_KIND,
    TASK_MODEL,
    Plan,
    TaskGroup,
    TaskPlacement,
)
from distrs.placement.rings import RingCoster
from distrs.placement.specs import ModelShape, WorkflowSpec
from distrs.placement.topology import Topology

B_BF16 = 2.0
INF = float("inf")


@dataclass(frozen=True)
class CostOptions:
    train_micro_batch: int = 4
    infer_micro_batch: int = 16
    max_decode_batch: int = 256
    kv_cache_fraction: float = 0.3
    memory_utilization: float = 0.9
    recompute: bool = True
    eta_colocated: float = 0.0
    load_balance: bool = True


# ----------------------------------------------------------------------------- App. B.2 terms


def layer_flops(shape: ModelShape, seq: int) -> float:
    """C_comp^layer: forward FLOPs of one transformer layer for one sample (B.2 "Computation")."""
    h1, h2 = shape.hidden, shape.intermediate
    qkvo = 2 * 4 * seq * h1 * h1
    attn = 2 * 2 * seq * seq * h1
    mlp = 2 * 3 * seq * h1 * h2
    return float(qkvo + attn + mlp)


def cv_tp(mbs: int, seq: int, h1: int, tp: int) -> float:
    """cv_tp(t,i,j) = B·mbs·(seq_in+seq_out)·h1·2(TP-1)/TP (B.2 "Tensor parallelism")."""
    return B_BF16 * mbs * seq * h1 * 2 * (tp - 1) / tp


def cv_pp(mbs: int, seq: int, h1: int) -> float:
    """cv_pp(t,i,j) = B·mbs·(seq_in+seq_out)·h1 (B.2 "Pipeline parallelism")."""
    return B_BF16 * mbs * seq * h1


def cv_dp(nl_j: int, shape: ModelShape, dp: int, tp: int) -> float:
    """cv_dp(t,j,k) = B·nl_j·(4h1²+3h1h2)·2(|V_L|-1)/(|V_L|·TP_j) (B.2 "Data parallelism")."""
    return B_BF16 * nl_j * shape.params_per_layer * 2 * (dp - 1) / (dp * tp)


def cv_allgather(nl: int, shape: ModelShape, group: int) -> float:
    """cv_all-gather(t,i) = B·nl·(4h1²+3h1h2)·(|V_Li|-1)/|V_Li| (B.2 "Resharding", "Synchronization")."""
    return B_BF16 * nl * shape.params_per_layer * (group - 1) / group


def comp_cost(nm: int, mbs: int, nl_j: int, flops_layer: float, comp_d: float, tp: int, train: bool) -> float:
    """C_comp(t,i,j,k) = (3·)nm·mbs·nl_j·C^layer/(comp_d·TP_j) (B.2; ×3 for fwd+bwd)."""
    return (3.0 if train else 1.0) * nm * mbs * nl_j * flops_layer / (comp_d * tp)


def tp_cost(nm: int, nl_j: int, ring: float, train: bool, recompute: bool = True) -> float:
    """C_tp(t,i,j) = 2·nm·nl_j·ring (forward) or 6·nm·nl_j·ring (fwd+bwd with recomputation).

    Without recomputation a fwd+bwd pass does two all-reduces each way (factor 4); the paper
    states only the forward and the recomputation cases.
    """
    factor = (6.0 if recompute else 4.0) if train else 2.0
    return factor * nm * nl_j * ring


def pp_cost(nm: int, min_edge: float, train: bool) -> float:
    """C_pp(t,i,j) = nm·min(α+cv/β) forward, 2·nm·min(...) forward and backward (B.2)."""
    return (2.0 if train else 1.0) * nm * min_edge


def hbm_cost(
    seq_out: int, nm: int, mbs: int, nl_j: int, shape: ModelShape, dbs: int, hbm_d: float, tp: int
) -> float:
    """C_hbm(t,i,j,k) = seq_out·nm·mbs·B·nl_j·(4h1²+3h1h2)/(dbs_d·hbm_d·TP_j) (B.2 "Decoding")."""
    return seq_out * nm * mbs * B_BF16 * nl_j * shape.params_per_layer / (dbs * hbm_d * tp)


def bubble_cost(stage_costs: Sequence[float], nm: int) -> float:
    """C_bubble(t,i) = Σ_{j≠0} (C_comp+C_tp+C_pp)(t,i,j)/nm (B.2 "Pipeline bubbles")."""
    return sum(stage_costs[1:]) / nm if nm else 0.0


def phi(costs: Sequence[float], eta: float) -> float:
    """Φ({C^t}) = max_t C^t + (1-η)(Σ_t C^t - max_t C^t) (B.4)."""
    if not costs:
        return 0.0
    top = max(costs)
    return top + (1.0 - eta) * (sum(costs) - top)


def balanced_split(total: int, weights: Sequence[float], minimum: int = 1) -> list[int]:
    """Largest-remainder split of ``total`` into parts proportional to ``weights``, each ≥ minimum."""
    n = len(weights)
    if n == 0:
        return []
    if total < minimum * n:
        raise ValueError(f"cannot split {total} into {n} parts of at least {minimum}")
    wsum = sum(weights)
    spare = total - minimum * n
    raw = [spare * w / wsum for w in weights] if wsum > 0 else [spare / n] * n
    parts = [minimum + math.floor(r) for r in raw]
    left = total - sum(parts)
    order = sorted(range(n), key=lambda i: (raw[i] - math.floor(raw[i]), weights[i]), reverse=True)
    for i in order[:left]:
        parts[i] += 1
    return parts


# ----------------------------------------------------------------------------- workflow tasks


def workflow_tasks(wf: WorkflowSpec) -> tuple[str, ...]:
    """Tasks of the workflow; reward inference exists only with a reward model (otherwise the
    reward is rule-based, e.g. computed by the DistRS reward service, and costs the trainer nothing)."""
    tasks = [GEN]
    if "reward" in wf.models:
        tasks.append(REWARD_INF)
    tasks.append(REF_INF)
    if wf.algorithm == "ppo":
        tasks.append(CRITIC_INF)
    tasks.append(ACTOR_TRAIN)
    if wf.algorithm == "ppo":
        tasks.append(CRITIC_TRAIN)
    return tuple(tasks)


INFERENCE_TASKS = (REWARD_INF, REF_INF, CRITIC_INF)
TRAINING_TASKS = (ACTOR_TRAIN, CRITIC_TRAIN)


# ----------------------------------------------------------------------------- evaluation


@dataclass
class TaskCost:
    task: str
    total: float
    comp: float = 0.0
    tp: float = 0.0
    pp: float = 0.0
    dp: float = 0.0
    hbm: float = 0.0
    bubble: float = 0.0
    layers: tuple[int, ...] = ()
    samples: tuple[int, ...] = ()


@dataclass
class Evaluation:
    feasible: bool
    total: float
    tasks: dict[str, TaskCost] = field(default_factory=dict)
    weight_transfer: float = 0.0
    reason: str = ""
    memory_peak_fraction: float = 0.0

    def throughput(self, wf: WorkflowSpec) -> float:
        if not self.feasible or self.total <= 0:
            return 0.0
        return wf.samples * (wf.seq_in + wf.seq_out) / self.total


def infeasible(reason: str) -> Evaluation:
    return Evaluation(False, INF, reason=reason)


class CostModel:
    """Evaluates plans for one (topology, workflow, options); caches ring costs."""

    def __init__(self, topo: Topology, wf: WorkflowSpec, opts: CostOptions | None = None) -> None:
        self.topo = topo
        self.wf = wf
        self.opts = opts or CostOptions()
        region_of_node = [topo.regions.index(n.region) for n in topo.cluster.nodes]
        self.rings = RingCoster(topo.node_alpha.tolist(), topo.node_beta.tolist(), region_of_node)
        self.comp = topo.comp.tolist()
        self.mem = topo.mem.tolist()
        self.hbm = topo.hbm.tolist()
        self.node = [int(x) for x in topo.node_of]
        self.tasks = workflow_tasks(wf)
        self.evaluations = 0
        self._replica_cache: dict[tuple, tuple[float, TaskCost]] = {}  # type: ignore[type-arg]

    # -- per-task helpers ---------------------------------------------------------------

    def shape(self, task: str) -> ModelShape:
        return self.wf.model(TASK_MODEL[task])

    def micro_batch(self, task: str) -> int:
        return self.opts.train_micro_batch if TASK_KIND[task] == "train" else self.opts.infer_micro_batch

    def layer_split(self, p: TaskPlacement) -> tuple[int, ...]:
        """Layer-level load balancing: layers ∝ the slowest GPU of each pipeline stage."""
        s = p.strategy
        nl = self.shape(p.task).layers
        if s.pp > nl:
            raise ValueError("more pipeline stages than layers")
        if p.layers:
            return p.layers
        weights = [
            min(self.comp[p.device(i, j, k)] for i in range(s.dp) for k in range(s.tp)) for j in range(s.pp)
        ]
        if not self.opts.load_balance:
            weights = [1.0] * s.pp
        return tuple(balanced_split(nl, weights))

    def decode_batch(self, d: int, shape: ModelShape, nl_j: int, tp: int, per_replica: int) -> int:
        """dbs_d: sequences whose KV cache fits in ``kv_cache_fraction`` of device memory."""
        seq = self.wf.seq_in + self.wf.seq_out
        kv_per_seq = 2 * B_BF16 * seq * nl_j * shape.kv_width / tp
        fits = int(self.opts.kv_cache_fraction * self.mem[d] // kv_per_seq) if kv_per_seq > 0 else per_replica
        return max(0, min(self.opts.max_decode_batch, per_replica, fits))

    def _replica_cost(
        self, p: TaskPlacement, i: int, layers: Sequence[int], samples: int
    ) -> tuple[float, TaskCost]:
        """Cost of replica i of a task (the term inside max_i of Ψ, B.3) and its parts.

        GPUs of one node are interchangeable, so the result is cached per (task, strategy,
        layers, samples, nodes of each stage).
        """
        s = p.strategy
        key = (
            p.task,
            s,
            tuple(layers),
            samples,
            tuple(tuple(sorted(self.node[d] for d in p.stage_devices(i, j))) for j in range(s.pp)),
        )
        hit = self._replica_cache.get(key)
        if hit is None:
            hit = self._replica_cost_uncached(p, i, layers, samples)
            if len(self._replica_cache) > 200_000:
                self._replica_cache.clear()
            self._replica_cache[key] = hit
        return hit

    def _replica_cost_uncached(
        self, p: TaskPlacement, i: int, layers: Sequence[int], samples: int
    ) -> tuple[float, TaskCost]:
        task = p.task
        kind = TASK_KIND[task]
        train = kind == "train"
        shape = self.shape(task)
        s = p.strategy
        mbs = self.micro_batch(task)
        nm = max(1, math.ceil(samples / mbs))
        seq_total = self.wf.seq_in + self.wf.seq_out
        # "we set seq_out to 0 in the estimation for the actor generation task" (B.2)
        seq_comp = self.wf.seq_in if kind == "gen" else seq_total
        flops = layer_flops(shape, seq_comp)
        vol_tp = cv_tp(mbs, seq_total, shape.hidden, s.tp)
        vol_pp = cv_pp(mbs, seq_total, shape.hidden)
        stage_sum = []
        best_inner = 0.0
        pp_max = 0.0
        hbm_max = 0.0
        parts = TaskCost(task, 0.0)
        for j in range(s.pp):
            devs = p.stage_devices(i, j)
            nl_j = layers[j]
            c_comp = max(comp_cost(nm, mbs, nl_j, flops, self.comp[d], s.tp, train) for d in devs)
            ring = self.rings([self.node[d] for d in devs], vol_tp) if s.tp > 1 else 0.0
            c_tp = tp_cost(nm, nl_j, ring, train, self.opts.recompute)
            c_pp = 0.0
            if j + 1 < s.pp:
                nxt = p.stage_devices(i, j + 1)
                c_pp = pp_cost(
                    nm,
                    self.rings.min_pair([self.node[d] for d in devs], [self.node[d] for d in nxt], vol_pp),
                    train,
                )
            if kind == "gen":
                for d in devs:
                    dbs = self.decode_batch(d, shape, nl_j, s.tp, samples)
                    if dbs < 1:
                        return INF, parts
                    hbm_max = max(
                        hbm_max, hbm_cost(self.wf.seq_out, nm, mbs, nl_j, shape, dbs, self.hbm[d], s.tp)
                    )
            stage_sum.append(c_comp + c_tp + c_pp)
            parts.comp = max(parts.comp, c_comp)
            parts.tp = max(parts.tp, c_tp)
            pp_max = max(pp_max, c_pp)
            best_inner = max(best_inner, c_comp + c_tp + (c_pp if train else 0.0))
        parts.pp = pp_max
        parts.hbm = hbm_max
        if train:
            # Ψ^train inner term: max_j(C_comp+C_tp+C_pp) + C_bubble(t,i)   (B.3)
            parts.bubble = bubble_cost(stage_sum, nm)
            return best_inner + parts.bubble, parts
        if kind == "gen":
            # Ψ^gen inner term: max_j(C_comp+C_tp) + C_pp + C_hbm   (B.3)
            return best_inner + pp_max + hbm_max, parts
        # Ψ^inf inner term: max_j(C_comp+C_tp) + C_pp   (B.3)
        return best_inner + pp_max, parts

    def task_cost(self, p: TaskPlacement) -> TaskCost:
        """C^t for one task: Ψ^gen / Ψ^inf / Ψ^train of B.3 (+ C_dp^t for training)."""
        s = p.strategy
        if len(p.devices) != s.size:
            raise ValueError(f"{p.task}: {len(p.devices)} devices for strategy {s}")
        try:
            layers = self.layer_split(p)
        except ValueError:
            return TaskCost(p.task, INF)
        total_samples = self.wf.samples
        if total_samples < s.dp:
            return TaskCost(p.task, INF)
        if p.samples:
            samples = list(p.samples)
        else:
            samples = balanced_split(total_samples, [1.0] * s.dp)
            if self.opts.load_balance and s.dp > 1:
                # data-level load balancing (§4.2): shares ∝ replica speed at an even split
                rates = []
                for i in range(s.dp):
                    c, _ = self._replica_cost(p, i, layers, samples[i])
                    rates.append(samples[i] / c if c > 0 and c != INF else 0.0)
                if all(r > 0 for r in rates):
                    samples = balanced_split(total_samples, rates)
        worst = 0.0
        agg = TaskCost(p.task, 0.0, layers=tuple(layers), samples=tuple(samples))
        for i in range(s.dp):
            c, parts = self._replica_cost(p, i, layers, samples[i])
            if c == INF:
                return TaskCost(p.task, INF)
            if c > worst:
                worst = c
            agg.comp = max(agg.comp, parts.comp)
            agg.tp = max(agg.tp, parts.tp)
            agg.pp = max(agg.pp, parts.pp)
            agg.hbm = max(agg.hbm, parts.hbm)
            agg.bubble = max(agg.bubble, parts.bubble)
        if TASK_KIND[p.task] == "train" and s.dp > 1:
            shape = self.shape(p.task)
            dp_worst = 0.0
            for j in range(s.pp):
                vol = cv_dp(layers[j], shape, s.dp, s.tp)
                for k in range(s.tp):
                    group = [self.node[p.device(i, j, k)] for i in range(s.dp)]
                    dp_worst = max(dp_worst, self.rings(group, vol))  # C_dp(t,j,k), B.2
            agg.dp = dp_worst  # C_dp^t = max_{j,k}
        agg.total = worst + agg.dp
        return agg

    # -- memory (C3) -------------------------------------------------------------------

    def placement_memory(
        self, p: TaskPlacement, layers: Sequence[int], gen_shares_train: bool
    ) -> dict[int, tuple[float, float]]:
        """Per device: (model memory, working memory) of one task's tasklets (C3 terms)."""
        out: dict[int, tuple[float, float]] = {}
        kind = TASK_KIND[p.task]
        shape = self.shape(p.task)
        s = p.strategy
        seq = self.wf.seq_in + self.wf.seq_out
        mbs = self.micro_batch(p.task)
        for j in range(s.pp):
            params = layers[j] * shape.params_per_layer / s.tp
            if j == 0 or j == s.pp - 1:
                params += shape.vocab * shape.hidden / s.tp
            if kind == "train":
                # BF16 weights + grads (4 B) and FP32 master + Adam moments (12 B),
                # the latter sharded over DP by the distributed optimizer.
                m_model = (4.0 + 12.0 / s.dp) * params
                inflight = s.pp - j  # 1F1B keeps pp-j micro-batches in flight
                ckpt = B_BF16 * mbs * seq * shape.hidden * layers[j] * inflight
                m_work = ckpt + 34.0 * mbs * seq * shape.hidden / s.tp
            elif kind == "inf":
                m_model = B_BF16 * params
                m_work = B_BF16 * mbs * seq * (shape.hidden + shape.intermediate) * 2 / s.tp
            else:
                m_model = 0.0 if gen_shares_train else B_BF16 * params
                m_work = 0.0
            for i in range(s.dp):
                for k in range(s.tp):
                    d = p.device(i, j, k)
                    if kind == "gen":
                        per = self.decode_batch(d, shape, layers[j], s.tp, self.wf.samples)
                        m_work = per * 2 * B_BF16 * seq * layers[j] * shape.kv_width / s.tp
                    out[d] = (m_model, m_work)
        return out

    def memory_fits(self, per_task: Sequence[dict[int, tuple[float, float]]]) -> tuple[bool, float, str]:
        """Constraint C3: max working + Σ model memory ≤ usable memory, for every device."""
        model_mem: dict[int, float] = {}
        working: dict[int, float] = {}
        for usage in per_task:
            for d, (m, w) in usage.items():
                model_mem[d] = model_mem.get(d, 0.0) + m
                if w > working.get(d, 0.0):
                    working[d] = w
        peak = 0.0
        for d, m in model_mem.items():
            need = m + working.get(d, 0.0)
            cap = self.opts.memory_utilization * self.mem[d]
            peak = max(peak, need / cap)
            if need > cap:
                return False, peak, f"device {d}: needs {need / 1e9:.1f} GB of {cap / 1e9:.1f} GB"
        return True, peak, ""

    def memory_check(self, plan: Plan, layer_splits: dict[str, tuple[int, ...]]) -> tuple[bool, float, str]:
        shares = self.wf.mode == "sync" and _same_group(plan, GEN, ACTOR_TRAIN)
        return self.memory_fits(
            [
                self.placement_memory(p, layer_splits[p.task], shares)
                for g in plan.groups
                for p in g.placements
            ]
        )

    # -- end to end (B.4) ----------------------------------------------------------------

    def weight_sync(self, train: TaskPlacement, gen: TaskPlacement) -> float:
        """C_sync = min_i C_all-gather(t,i) + max_i' C_broadcast(t',i') + C_p2p(t,t') (B.2)."""
        shape = self.shape(ACTOR_TRAIN)
        nl = shape.layers
        st, sg = train.strategy, gen.strategy
        ag = min(
            self.rings(
                [self.node[d] for d in train.replica_devices(i)], cv_allgather(nl, shape, st.pp * st.tp)
            )
            for i in range(st.dp)
        )
        bc = max(
            self.rings([self.node[d] for d in gen.replica_devices(i)], cv_allgather(nl, shape, sg.pp * sg.tp))
            for i in range(sg.dp)
        )
        p2p = self.rings.min_pair(
            [self.node[d] for d in train.devices],
            [self.node[d] for d in gen.devices],
            B_BF16 * nl * shape.params_per_layer,
        )
        return ag + bc + p2p

    def reshard(self, train: TaskPlacement) -> float:
        """C_reshard = max_i C_all-gather(t,i) over actor-training replicas (B.2 "Resharding")."""
        shape = self.shape(ACTOR_TRAIN)
        st = train.strategy
        return max(
            self.rings(
                [self.node[d] for d in train.replica_devices(i)],
                cv_allgather(shape.layers, shape, st.pp * st.tp),
            )
            for i in range(st.dp)
        )

    def grouped_phi(self, plan: Plan, costs: dict[str, float], tasks: Sequence[str]) -> float:
        """Φ over tasks without mutual dependencies, per task group (see module docstring)."""
        worst = 0.0
        for g in plan.groups:
            members = [costs[t] for t in tasks if t in g.tasks and t in costs]
            if members:
                worst = max(worst, phi(members, self.opts.eta_colocated))
        return worst

    def evaluate(self, plan: Plan) -> Evaluation:
        self.evaluations += 1
        placed = {p.task for g in plan.groups for p in g.placements}
        if placed != set(self.tasks):
            return infeasible(f"plan covers {sorted(placed)}, workflow needs {sorted(self.tasks)}")
        seen: set[int] = set()
        for g in plan.groups:
            if seen & set(g.devices):
                return infeasible("GPU groups overlap")
            seen |= set(g.devices)
            for p in g.placements:
                if not set(p.devices) <= set(g.devices):
                    return infeasible(f"{p.task}: tasklet on a GPU outside its group")
                if len(set(p.devices)) != len(p.devices):
                    return infeasible(f"{p.task}: two tasklets on one GPU")  # C1 within a task
        if self.wf.mode == "async" and len(plan.group_of(GEN).tasks) != 1:
            return infeasible("async RL needs actor generation in its own task group")
        costs: dict[str, TaskCost] = {}
        for g in plan.groups:
            for p in g.placements:
                tc = self.task_cost(p)
                if tc.total == INF:
                    return infeasible(f"{p.task}: infeasible strategy {p.strategy}")
                costs[p.task] = tc
        ok, peak, why = self.memory_check(plan, {t: c.layers for t, c in costs.items()})
        if not ok:
            return Evaluation(False, INF, costs, reason=why, memory_peak_fraction=peak)
        c = {t: tc.total for t, tc in costs.items()}
        inf_tasks = [t for t in INFERENCE_TASKS if t in c]
        train_tasks = [t for t in TRAINING_TASKS if t in c]
        stage2 = self.grouped_phi(plan, c, inf_tasks)
        stage3 = self.grouped_phi(plan, c, train_tasks)
        gen_p, train_p = plan.placement(GEN), plan.placement(ACTOR_TRAIN)
        colocated = _same_group(plan, GEN, ACTOR_TRAIN)
        if self.wf.mode == "sync":
            transfer = self.reshard(train_p) if colocated else self.weight_sync(train_p, gen_p)
            # C_SyncPPO = C^1 + Φ({C^2,C^3,C^4}) + Φ({C^5,C^6}) + C_reshard ; SyncGRPO alike (B.4)
            total = c[GEN] + stage2 + stage3 + transfer
        else:
            transfer = self.weight_sync(train_p, gen_p)
            # C_AsyncPPO = max(C^1, Φ({C^2,C^3,C^4}) + Φ({C^5,C^6})) + C_sync ; AsyncGRPO alike (B.4)
            total = max(c[GEN], stage2 + stage3) + transfer
        return Evaluation(True, total, costs, weight_transfer=transfer, memory_peak_fraction=peak)


def _same_group(plan: Plan, a: str, b: str) -> bool:
    return plan.group_of(a) is plan.group_of(b)


def group_price(topo: Topology, groups: Sequence[TaskGroup]) -> float:
    return sum(topo.price_per_hour(g.devices) for g in groups)
