"""Payloads for the ``kernelbench`` reward type (CUDA kernels scored the way KernelBench scores them).

The service takes KernelBench's own field names (see the ``kernelbench`` paragraph of DESIGN.md), so
a trainer already built around KernelBench's ``eval_kernel_against_ref`` passes the same values::

    from distrs_client import kernelbench_payload
    from distrs_client.kernelbench import load_problem

    ref = load_problem("level1/19_ReLU.py")
    payload = kernelbench_payload(ref, completion=text)           # the service extracts the code
    client.submit("task", "step-7", "req-0", "kernelbench", payload)

Arguments are checked here so a typo fails in the trainer at once (``ValueError`` naming the
argument) instead of as one ``invalid`` result per rollout. Standard library only: this runs in
rollout workers that may not have torch or KernelBench installed.
"""

from __future__ import annotations

import ast
import math
import os
from typing import Any

BACKENDS = ("cuda", "triton", "cpp")
PRECISIONS = ("fp32", "fp16", "bf16")
PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")


def _check_trials(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _check_tol(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def kernelbench_payload(
    original_model_src: str,
    *,
    completion: str | None = None,
    custom_model_src: str | None = None,
    backend: str = "cuda",
    precision: str = "fp32",
    num_correct_trials: int = 5,
    num_perf_trials: int = 100,
    atol: float | None = None,
    rtol: float | None = None,
    tolerance: str | None = None,
    measure_performance: bool = True,
    reward: str | None = None,
) -> dict[str, Any]:
    """The ``kernelbench`` request payload; arguments left ``None`` are omitted (service defaults).

    Pass exactly one of ``completion`` (the model's raw text; the service takes its last Python
    block) and ``custom_model_src`` (the candidate module's source). ``tolerance`` names a
    tolerance preset of the service (e.g. ``"v0.1"``: atol = rtol = 1e-2); ``atol``/``rtol``
    override it. ``reward`` names a reward formula the service knows.
    """
    if not isinstance(original_model_src, str) or not original_model_src.strip():
        raise ValueError("original_model_src must be a non-empty string (the reference problem's source)")
    if (completion is None) == (custom_model_src is None):
        raise ValueError("pass exactly one of completion or custom_model_src")
    if completion is not None and not isinstance(completion, str):
        raise ValueError(f"completion must be a string, got {type(completion).__name__}")
    if custom_model_src is not None and not isinstance(custom_model_src, str):
        raise ValueError(f"custom_model_src must be a string, got {type(custom_model_src).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    correct = _check_trials("num_correct_trials", num_correct_trials)
    perf = _check_trials("num_perf_trials", num_perf_trials)
    tols = {"atol": _check_tol("atol", atol), "rtol": _check_tol("rtol", rtol)}
    if tolerance is not None and (not isinstance(tolerance, str) or not tolerance.strip()):
        raise ValueError(f"tolerance must be a non-empty string naming a preset, got {tolerance!r}")
    if not isinstance(measure_performance, bool):
        raise ValueError(f"measure_performance must be true or false, got {measure_performance!r}")
    if reward is not None and (not isinstance(reward, str) or not reward.strip()):
        raise ValueError(f"reward must be a non-empty string naming a reward formula, got {reward!r}")
    payload: dict[str, Any] = {"original_model_src": original_model_src}
    if custom_model_src is not None:
        payload["custom_model_src"] = custom_model_src
    else:
        payload["completion"] = completion
    payload.update(
        backend=backend,
        precision=precision,
        num_correct_trials=correct,
        num_perf_trials=perf,
    )
    payload.update({k: v for k, v in tols.items() if v is not None})
    if tolerance is not None:
        payload["tolerance"] = tolerance
    payload["measure_performance"] = measure_performance
    if reward is not None:
        payload["reward"] = reward
    return payload


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module defines at top level (also under a top-level ``if``/``try``)."""
    names: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.If | ast.Try):
            stack.extend(stmt.body)
            stack.extend(stmt.orelse)
            if isinstance(stmt, ast.Try):
                stack.extend(stmt.finalbody)
                for h in stmt.handlers:
                    stack.extend(h.body)
    return names


def load_problem(path: str | os.PathLike[str]) -> str:
    """The source of a KernelBench-format problem file, checked to define ``Model``, ``get_inputs``
    and ``get_init_inputs`` (read with ``ast``, never imported). ``ValueError`` names what is missing."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    try:
        tree = ast.parse(src, filename=os.fspath(path))
    except SyntaxError as e:
        raise ValueError(f"{os.fspath(path)} is not valid Python: {e.msg} (line {e.lineno})") from e
    missing = [n for n in PROBLEM_NAMES if n not in _top_level_names(tree)]
    if missing:
        raise ValueError(
            f"{os.fspath(path)} is not a KernelBench problem: it does not define {', '.join(missing)}"
        )
    return src
