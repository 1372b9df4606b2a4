"""What a scaling decision reads (``PlanContext``) and what it returns (``Decision``).

This is the stable boundary between the pure scaling algorithms and whoever drives them: the
live planner process builds a ``PlanContext`` from the store, the cluster simulator builds one
from its own state. Everything is plain data; the clock is ``now`` (no wall-clock reads here).

Vocabulary follows DistRS Sec. 5: a batch's *anchor* is the time its profile's r_i are measured
from (the rollout-start hint, or the registration time when no hint was given); *queued* and
*running_elapsed* are the Queuing_k / Running_k sets of Alg. 2; ``max_extra_delay_s`` is D.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from distrs.core.history import BatchProfile
from distrs.core.stages import StageSpec

BatchKey = tuple[str, str]
"""(task, batch_id): identifies one batch across tenants."""


@dataclass(frozen=True)
class ActiveBatch:
    """A batch the service has seen and not yet finished (one entry of Alg. 2's input)."""

    task: str
    batch_id: str
    reward_type: str
    size: int
    anchor: float
    submitted: int = 0
    queued: Mapping[str, int] = field(default_factory=dict)
    running_elapsed: Mapping[str, Sequence[float]] = field(default_factory=dict)
    finished: Sequence[Mapping[str, float]] = ()
    """s_j per stage of (a sample of) this batch's requests that have already finished: what a
    task's first batch, which has no history, learns its stage times from (``fallback.py``)."""

    @property
    def key(self) -> BatchKey:
        return (self.task, self.batch_id)


@dataclass(frozen=True)
class PolicyOptions:
    """Tunables shared by the policies. Defaults are the ones the benchmarks use."""

    static_replicas: Mapping[str, int] | int = 1
    """``static`` policy: replicas per stage (one number for every stage, or per stage name)."""
    default_span_s: float = 300.0
    """First-batch fallback, last resort: requests spread evenly over [first_s, span_s] after
    the anchor (a compressed rollout, so the guess errs on the side of more workers) ..."""
    default_first_s: float = 30.0
    default_stage_fraction: float = 0.25
    """... each running ``fraction × T_j`` at every stage of its type (see ``fallback.py``)."""
    learn_min_finished: int = 32
    """The default's stage times give way to the finished requests of the active first batches
    of the same reward type once at least this many have finished (0 = never)."""
    t_estimate_batches: int = 5
    """T_b (the deadline base and EBF priority) is the earliest T, relative to its anchor, of the
    task's last this many finished batches (1 = the previous batch only, as in Alg. 2)."""
    seed: int = 0
    """Mixed into the sampling of Queuing_k / Running_k requests (Alg. 2 lines 14, 18)."""
    timeout_check: Literal["enqueue", "start"] = "enqueue"
    """When the timeout-aware rule reads ts: ``enqueue`` (as a request joins a queue) or ``start``
    (just before a waiting request starts; stricter). See simulate.py."""
    timeout_rule: Literal["batch", "request"] = "request"
    """The timeout-aware rule's deadline (simulate.py). ``batch``: Sec. 5.1 as written, a
    request found queued at stage k fails the check when LT = ts + Σ_{j≥k} T_j > T_b + D.
    ``request``: LT is compared with the batch's T as it would be if this request ran to its
    timeouts, max(T_b, its own zero-queuing worst-case completion) + D; the request may then wait
    up to D in all (measured from when it could have reached the stage without waiting), which
    is what it could add to its batch's extra delay."""
    tail_spares: int = 2
    """Idle workers the per-request rule keeps beyond the running requests at each stage a batch
    in its tail may still reach (``policies.spare_in_tails``), for requests the estimate did not
    foresee; 0 = none."""
    knowledge: Literal["estimate", "arrivals", "requests", "exact"] = "estimate"
    """What the searched policies know of the active batches, beyond Alg. 2's estimate (the
    simulator's gap breakdown, ``sim/explain.py``; needs ``PlanContext.oracle``):
    ``estimate`` (the live planner: Alg. 2 from history), ``arrivals`` (the true arrival times
    of requests still to come, their stage times from history at the same position in the
    batch), ``requests`` (every remaining request exactly, T_b still estimated), ``exact``
    (also the true T_b; with the timeout rule off this is ``ideal``)."""
    search_hint: Mapping[str, int] | None = None
    """The previous decision's own Alg. 1 answer per stage (``Decision.debug["search"]``),
    before the lookahead window and the floors changed it: the search probes it and one below
    first (two probes per stage when the workload has not changed much). Without it the
    search probes ``warm_start``, which after a lookahead scale-down is often far below."""
    warm_start: Mapping[str, int] | None = None
    """Previous decision per stage; lets the search probe near it first (same answer, fewer runs),
    and is the allocation a scale-down starts from (``scale_down_margin_s``)."""
    scale_down_margin_s: float | None = None
    """Hysteresis for scale-down: a stage shrinks below ``warm_start`` only as far as the plan
    still meets every deadline this many seconds early, so a later correction has time to start
    workers again (set it to the worker start time). None or 0: no hysteresis."""
    scale_up_lookahead_s: float | None = None
    """Scale up only to the workers the plan keeps busy within this many seconds (re-plan
    interval + worker start time); later ones are started by later re-plans. None or 0: off."""
    lookahead_scale_down: bool = True
    """Apply the same window to a pool that is already larger: keep only the workers the plan
    keeps busy within ``scale_up_lookahead_s`` (and every busy one); False: scale-ups only."""


@dataclass(frozen=True)
class OracleBatch:
    """Perfect knowledge of one active batch, for the ``ideal`` policy (simulator only).

    ``arrival`` is absolute; ``service`` is the remaining run time per stage (pipeline order,
    0 = the request does not visit that stage); ``first_stage``/``running`` say where each
    request is now. ``earliest_completion`` is the batch's true T (Eq. 2).
    """

    key: BatchKey
    reward_type: str
    earliest_completion: float
    arrival: npt.NDArray[np.float64]
    service: npt.NDArray[np.float64]
    first_stage: npt.NDArray[np.int64]
    running: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PlanContext:
    """Everything one scaling decision may look at."""

    now: float
    stages: Sequence[StageSpec]
    batches: Sequence[ActiveBatch]
    histories: Mapping[str, Sequence[BatchProfile]] = field(default_factory=dict)
    max_extra_delay_s: float = 2.0
    max_replicas: int = 1000
    stage_max_replicas: Mapping[str, int] = field(default_factory=dict)
    """Tighter caps for some stages (``distrs up``: CPU stages at the cores available); the
    search never plans more workers than a stage may get."""
    policy: str = "distrs"
    options: PolicyOptions = field(default_factory=PolicyOptions)
    reward_stages: Mapping[str, Sequence[str]] | None = None
    """Stage names per reward type; None = every type uses all ``stages`` in order."""
    oracle: Sequence[OracleBatch] | None = None
    """Ground truth for the ``ideal`` policy; the live planner leaves it None."""

    def cap(self, stage: str) -> int:
        """The most workers ``stage`` may have."""
        return min(self.max_replicas, self.stage_max_replicas.get(stage, self.max_replicas))

    def stages_of(self, reward_type: str) -> Sequence[str]:
        if self.reward_stages is not None and reward_type in self.reward_stages:
            return self.reward_stages[reward_type]
        return [s.name for s in self.stages]


@dataclass
class Decision:
    """Replicas per stage plus what the policy believed when it chose them."""

    replicas: dict[str, int]
    estimated_completion: dict[BatchKey, float] = field(default_factory=dict)
    dedicated: dict[str, dict[str, int]] | None = None
    """``zq-dedicated`` only: replicas per task and stage (separate pools, summed in ``replicas``)."""
    debug: dict[str, Any] = field(default_factory=dict)
