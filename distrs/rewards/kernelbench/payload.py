"""The ``kernelbench`` payload, in KernelBench's own field names, validated field by field.

A payload names the reference problem (``original_model_src``: a ``Model`` with ``get_inputs()``
and ``get_init_inputs()``) and the candidate (``custom_model_src``, or ``completion``: the
model's text, from which the last fenced python block is taken). Tolerances default to
KernelBench's current main per precision (1e-4 for fp32, 1e-2 for fp16/bf16);
``tolerance: "v0.1"`` gives its old 1e-2 everywhere, as CUDA-L1 and KernelGYM still use.

A malformed payload is the trainer's fault: :class:`distrs.rewards.judge.InvalidPayload` names
the field and the request ends ``invalid``. A completion without any code block is the model's
fault: it is a format error, scored by the reward formula (``formulas.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from distrs.rewards.base import InvalidPayload
from distrs.rewards.kernelbench.completion import extract_source
from distrs.rewards.kernelbench.formulas import FORMULAS

BACKENDS = ("cuda", "triton", "cpp")
# Backends this service can build and run now; "triton" compiles at execute and is next.
SUPPORTED_BACKENDS = ("cuda", "cpp")
PRECISIONS = ("fp32", "fp16", "bf16")
# KernelBench's current main: fp32 1e-4, half precisions 1e-2; its v0/v0.1 releases: 1e-2.
DEFAULT_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
V01_TOLERANCE = 1e-2
MAX_SOURCE_BYTES = 256 * 1024
MAX_CORRECT_TRIALS = 100
MAX_PERF_TRIALS = 1000


@dataclass(frozen=True)
class KernelPayload:
    original_model_src: str
    custom_model_src: str | None  # None: the completion held no code block (a format error)
    backend: str = "cuda"
    precision: str = "fp32"
    num_correct_trials: int = 5
    num_perf_trials: int = 100
    atol: float = 1e-4
    rtol: float = 1e-4
    measure_performance: bool = True
    reward: str = "speedup"
    speedup_cap: float = 10.0

    @property
    def device(self) -> str:
        """Where the candidate runs: a CPU extension (``cpp``) on the CPU, others on the GPU."""
        return "cpu" if self.backend == "cpp" else "cuda"


def _source(payload: dict[str, Any], name: str) -> str:
    v = payload.get(name)
    if not isinstance(v, str) or not v.strip():
        raise InvalidPayload(name, "must be a non-empty string")
    if len(v.encode()) > MAX_SOURCE_BYTES:
        raise InvalidPayload(name, f"must be at most {MAX_SOURCE_BYTES} bytes")
    return v


def _choice(payload: dict[str, Any], name: str, choices: tuple[str, ...], default: str) -> str:
    v = payload.get(name, default)
    if v is None:
        return default
    if v not in choices:
        raise InvalidPayload(name, f"must be one of {', '.join(choices)}; got {v!r}")
    return str(v)


def _int(payload: dict[str, Any], name: str, default: int, high: int) -> int:
    v = payload.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high:
        raise InvalidPayload(name, f"must be an integer in [1, {high}]; got {v!r}")
    return v


def _tol(payload: dict[str, Any], name: str, default: float) -> float:
    v = payload.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
        raise InvalidPayload(name, f"must be a number in [0, 1]; got {v!r}")
    return float(v)


def parse_payload(payload: Any) -> KernelPayload:
    """Validate a ``kernelbench`` payload; InvalidPayload names the first bad field."""
    if not isinstance(payload, dict):
        raise InvalidPayload("payload", f"must be an object, got {type(payload).__name__}")
    original = _source(payload, "original_model_src")
    has_custom = payload.get("custom_model_src") is not None
    has_completion = payload.get("completion") is not None
    if has_custom == has_completion:
        raise InvalidPayload("custom_model_src", "give exactly one of custom_model_src and completion")
    custom = _source(payload, "custom_model_src") if has_custom else None
    if has_completion:
        completion = payload["completion"]
        if not isinstance(completion, str):
            raise InvalidPayload("completion", "must be a string")
        if len(completion.encode()) > 4 * MAX_SOURCE_BYTES:
            raise InvalidPayload("completion", f"must be at most {4 * MAX_SOURCE_BYTES} bytes")
        custom = extract_source(completion)
    backend = _choice(payload, "backend", BACKENDS, "cuda")
    if backend not in SUPPORTED_BACKENDS:
        raise InvalidPayload(
            "backend", f"{backend!r} is not served yet; use one of {', '.join(SUPPORTED_BACKENDS)}"
        )
    precision = _choice(payload, "precision", PRECISIONS, "fp32")
    tolerance = payload.get("tolerance")
    if tolerance is not None and tolerance != "v0.1":
        raise InvalidPayload(
            "tolerance", f'must be "v0.1" (KernelBench\'s old 1e-2) or absent; got {tolerance!r}'
        )
    default_tol = V01_TOLERANCE if tolerance == "v0.1" else DEFAULT_TOLERANCE[precision]
    measure = payload.get("measure_performance", True)
    if not isinstance(measure, bool):
        raise InvalidPayload("measure_performance", "must be true or false")
    reward = _choice(payload, "reward", tuple(FORMULAS), "speedup")
    cap = payload.get("speedup_cap", 10.0)
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap <= 0:
        raise InvalidPayload("speedup_cap", f"must be a number > 0; got {cap!r}")
    return KernelPayload(
        original_model_src=original,
        custom_model_src=custom,
        backend=backend,
        precision=precision,
        num_correct_trials=_int(payload, "num_correct_trials", 5, MAX_CORRECT_TRIALS),
        num_perf_trials=_int(payload, "num_perf_trials", 100, MAX_PERF_TRIALS),
        atol=_tol(payload, "atol", default_tol),
        rtol=_tol(payload, "rtol", default_tol),
        measure_performance=measure,
        reward=reward,
        speedup_cap=float(cap),
    )
