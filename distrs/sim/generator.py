"""A synthetic ``distrs-trace/1`` generator calibrated to the DistRS workload study (Sec. 3).

The real CUDA code-generation trace is not public; the shape below follows what Sec. 3.1 and
Fig. 5-6 report (and what ``../shared/traces`` were calibrated to), with every number a field of
``GeneratorParams`` so it can be changed and is recorded in the trace's meta file:

* **Arrivals** (Fig. 5): no request for the first ``first_arrival_s`` of a rollout, then
  r = first_arrival_s + X with X log-normal (median ``arrival_median_s``, shape
  ``arrival_sigma``): a fast rise to a peak and a long tail, capped at ``rollout_max_s`` (the
  generation-length limit). The median drifts by ``arrival_drift_s`` per iteration, so adjacent
  iterations are alike (Fig. 5c). Each task scales its arrivals by a factor drawn from
  ±``task_jitter``.
* **Outcomes** (Fig. 6b): the shares of ``gen_failed``/``compile_failed``/``compile_timeout``
  fall linearly over training while ``success`` grows; of the requests that execute,
  ``exec_timeout_share`` hit the execution timeout and the rest not successful are
  ``exec_error``.
* **Run times** (Fig. 6c): compilation log-normal around ``compile_median_s`` (shorter,
  ``compile_failed_median_s``, when it fails), execution around ``exec_median_s``; timeouts
  (``compile_timeout_s``/``exec_timeout_s``) record exactly the threshold.
* **Iterations**: colocated — the next rollout starts ``training_s`` (± ``training_jitter_s``)
  after the batch's last reward (T); disaggregated with one-step staleness — rollouts run back to
  back, the next one starting ``disagg_gap_s`` after the previous rollout's last arrival. Task
  starts are staggered uniformly over [``stagger_min_s``, ``stagger_max_s``].
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from distrs.core.stages import ResourceClass, StageSpec
from distrs.sim.trace import Trace

STATUSES = ["gen_failed", "compile_failed", "compile_timeout", "exec_error", "exec_timeout", "success"]


@dataclass(frozen=True)
class GeneratorParams:
    tasks: int = 6
    iterations: int = 50
    batch: int = 2048
    mode: str = "colocated"
    seed: int = 7
    stagger_min_s: float = 20.0
    stagger_max_s: float = 120.0
    first_arrival_s: float = 27.0
    arrival_median_s: float = 68.0
    arrival_sigma: float = 0.6
    arrival_drift_s: float = 0.4
    rollout_max_s: float = 450.0
    task_jitter: float = 0.08
    training_s: float = 300.0
    training_jitter_s: float = 15.0
    disagg_gap_s: float = 5.0
    gen_failed_share: tuple[float, float] = (0.44, 0.085)
    compile_failed_share: tuple[float, float] = (0.25, 0.07)
    compile_timeout_share: tuple[float, float] = (0.005, 0.002)
    success_share: tuple[float, float] = (0.177, 0.666)
    exec_timeout_share: float = 0.06
    compile_median_s: float = 56.0
    compile_sigma: float = 0.22
    compile_failed_median_s: float = 27.0
    compile_failed_sigma: float = 0.35
    compile_long_share: float = 0.01
    exec_median_s: float = 2.9
    exec_sigma: float = 0.85
    compile_timeout_s: float = 120.0
    exec_timeout_s: float = 60.0
    gpu_cost: float = 8.0


def cuda_stages(p: GeneratorParams) -> list[StageSpec]:
    return [
        StageSpec("compile", ResourceClass.CPU, p.compile_timeout_s, 1.0),
        StageSpec("execute", ResourceClass.GPU, p.exec_timeout_s, p.gpu_cost),
    ]


def _shares(p: GeneratorParams, progress: float) -> np.ndarray:
    """Outcome probabilities in STATUSES order at training progress ∈ [0, 1]."""

    def lerp(ab: tuple[float, float]) -> float:
        return ab[0] + (ab[1] - ab[0]) * progress

    gen, cf, ct, ok = (
        lerp(p.gen_failed_share),
        lerp(p.compile_failed_share),
        lerp(p.compile_timeout_share),
        lerp(p.success_share),
    )
    executed = max(1.0 - gen - cf - ct, 0.0)
    ok = min(ok, executed)
    et = min(executed * p.exec_timeout_share, executed - ok)
    ee = max(executed - ok - et, 0.0)
    v = np.array([gen, cf, ct, ee, et, ok])
    return v / v.sum()


def _batch(
    p: GeneratorParams, rng: np.random.Generator, it: int, scale: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r, status, s[n, 2]) for one batch."""
    n = p.batch
    median = (p.arrival_median_s + p.arrival_drift_s * it) * scale
    x = median * np.exp(p.arrival_sigma * rng.standard_normal(n))
    r = np.minimum(p.first_arrival_s + x, p.rollout_max_s)
    progress = it / max(p.iterations - 1, 1)
    status = rng.choice(len(STATUSES), size=n, p=_shares(p, progress))
    s = np.zeros((n, 2))
    compiled = status >= 1
    comp = p.compile_median_s * np.exp(p.compile_sigma * rng.standard_normal(n))
    comp = np.where(rng.random(n) < p.compile_long_share, comp * 1.8, comp)
    failed = p.compile_failed_median_s * np.exp(p.compile_failed_sigma * rng.standard_normal(n))
    comp = np.where(status == 1, failed, comp)
    comp = np.where(status == 2, p.compile_timeout_s, np.minimum(comp, p.compile_timeout_s))
    s[:, 0] = np.where(compiled, comp, 0.0)
    executed = status >= 3
    ex = p.exec_median_s * np.exp(p.exec_sigma * rng.standard_normal(n))
    ex = np.where(status == 3, ex * 0.75, ex)
    ex = np.where(status == 4, p.exec_timeout_s, np.minimum(ex, 45.0))
    s[:, 1] = np.where(executed, ex, 0.0)
    return r, status, s


def generate(p: GeneratorParams) -> Trace:
    """A trace with ``tasks × iterations × batch`` requests."""
    if p.mode not in ("colocated", "disaggregated"):
        raise ValueError(f"mode must be 'colocated' or 'disaggregated', not {p.mode!r}")
    rng = np.random.default_rng(p.seed)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("task", "it", "req", "rs", "arr", "status", "s")}
    for t in range(p.tasks):
        start = rng.uniform(p.stagger_min_s, p.stagger_max_s)
        scale = 1.0 + rng.uniform(-p.task_jitter, p.task_jitter)
        for it in range(p.iterations):
            r, status, s = _batch(p, rng, it, scale)
            arr = start + r
            n = r.size
            cols["task"].append(np.full(n, t))
            cols["it"].append(np.full(n, it))
            cols["req"].append(np.arange(n))
            cols["rs"].append(np.full(n, start))
            cols["arr"].append(arr)
            cols["status"].append(status)
            cols["s"].append(s)
            if p.mode == "colocated":
                done = float((arr + s.sum(axis=1)).max())
                start = done + max(p.training_s + rng.normal(0.0, p.training_jitter_s), 1.0)
            else:
                start = float(arr.max()) + p.disagg_gap_s
    order = np.argsort(np.concatenate(cols["arr"]), kind="stable")

    def cat(key: str) -> np.ndarray:
        return np.concatenate(cols[key])[order]

    return Trace(
        mode=p.mode,
        stages=cuda_stages(p),
        task_names=[f"task-{i}" for i in range(p.tasks)],
        status_names=list(STATUSES),
        task=cat("task").astype(np.int64),
        iteration=cat("it").astype(np.int64),
        request=cat("req").astype(np.int64),
        rollout_start=np.round(cat("rs"), 3),
        arrival=np.round(cat("arr"), 3),
        status=cat("status").astype(np.int64),
        s=np.round(np.concatenate(cols["s"])[order], 3),
        seed=p.seed,
        extra_meta={"calibration": "distrs.sim.generator", "generator": asdict(p)},
    )
