"""TRL's own reward step, run from TRL's published wheel (``trl==1.16.0``, never vendored).

``GRPOTrainer._calculate_rewards`` (``trl/trainer/grpo_trainer.py``) is what calls every function
of ``reward_funcs``: keyword columns, ``trainer_state``, ``log_extra``, ``log_metric``; ``None``
read as NaN; a length check that raises; async functions gathered on TRL's event loop; and a
warning naming the row when every function returned ``None`` for it. ``grpo_trainer.py`` cannot
be imported without torch, transformers and accelerate (a multi-GB GPU stack), so
:func:`calculate_rewards` takes the method's source text out of the wheel with ``ast`` and runs
it unchanged, with these stand-ins for the names it uses:

* ``torch``: :class:`_Torch`, the five tensor operations the method uses, on numpy arrays;
* ``gather`` (accelerate's all-gather across processes): identity, as for one process;
* ``profiling_context``: no-op; ``logger``: a standard logger; ``nn.Module``: a class no reward
  function is an instance of (reward *models* are not what this adapter is);
* ``is_async_callable``: TRL's own, taken from ``trl/trainer/utils.py`` of the same wheel.

The weighted sum TRL then takes (``_generate_and_score_completions``:
``(rewards_per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1)``, ``reward_weights`` all
ones unless ``GRPOConfig.reward_weights`` is set) is :func:`weighted_rewards`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from tests.integration.compat.framework_sources import TRL, source


class _Tensor:
    """The few tensor operations ``_calculate_rewards`` applies, on a numpy array."""

    def __init__(self, a: Any) -> None:
        self.a = np.asarray(a)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.a[key] = value.a if isinstance(value, _Tensor) else value

    def all(self, dim: int) -> _Tensor:
        return _Tensor(self.a.all(axis=dim))

    def any(self) -> _Tensor:
        return _Tensor(self.a.any())

    def __bool__(self) -> bool:
        return bool(self.a)

    def nonzero(self, as_tuple: bool) -> tuple[list[int], ...]:
        assert as_tuple
        return tuple([int(i) for i in ix] for ix in np.nonzero(self.a))


class _Torch:
    nan = float("nan")
    float32 = np.float32

    @staticmethod
    def zeros(*shape: int, device: Any = None) -> _Tensor:
        return _Tensor(np.zeros(shape, dtype=np.float32))

    @staticmethod
    def tensor(data: Sequence[Any], dtype: Any = None, device: Any = None) -> _Tensor:
        return _Tensor(np.asarray(data, dtype=dtype))

    @staticmethod
    def isnan(t: _Tensor) -> _Tensor:
        return _Tensor(np.isnan(t.a))


class _NotARewardModel:
    pass


def _function_source(path: str, name: str, cls: str | None = None) -> str:
    """The source text of ``cls.name`` (or module-level ``name``) in the wheel's ``path``."""
    text = source(*TRL, path).read_text()
    tree = ast.parse(text)
    scope: list[ast.stmt] = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)
    segment = ast.get_source_segment(text, node)
    assert segment is not None
    return textwrap.dedent(segment)


def _load(name: str, code: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    exec(compile(code, f"trl-{TRL[1]}:{name}", "exec"), namespace)
    fn: Callable[..., Any] = namespace[name]
    return fn


@contextlib.contextmanager
def _event_loop_in_daemon() -> Iterator[asyncio.AbstractEventLoop]:
    """TRL's ``async_loop``: an event loop running in a daemon thread."""
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(timeout=10)
        loop.close()


def trl_functions() -> tuple[Callable[..., Any], Callable[..., bool]]:
    """(``GRPOTrainer._calculate_rewards``, ``is_async_callable``) from the TRL wheel."""
    utils_ns: dict[str, Any] = {}
    exec("import functools, inspect\nfrom collections.abc import Callable", utils_ns)
    is_async = _load(
        "is_async_callable", _function_source("trl/trainer/utils.py", "is_async_callable"), utils_ns
    )
    ns: dict[str, Any] = {
        "torch": _Torch,
        "nn": SimpleNamespace(Module=_NotARewardModel),
        "asyncio": asyncio,
        "gather": lambda t: t,
        "profiling_context": lambda trainer, name: contextlib.nullcontext(),
        "is_async_callable": is_async,
        "logger": logging.getLogger("trl.trainer.grpo_trainer"),
    }
    calc = _load(
        "_calculate_rewards",
        _function_source("trl/trainer/grpo_trainer.py", "_calculate_rewards", cls="GRPOTrainer"),
        ns,
    )
    return calc, is_async


def calculate_rewards(
    reward_funcs: list[Callable[..., Any]], rows: list[dict[str, Any]], step: int = 0
) -> np.ndarray:
    """TRL's ``rewards_per_func`` (rows x functions, NaN where a function gave ``None``) for one
    step's ``rows`` (dataset columns plus ``prompt`` and ``completion``), as TRL computes it."""
    calc, _ = trl_functions()
    prompts = [r["prompt"] for r in rows]
    completions = [r["completion"] for r in rows]
    with _event_loop_in_daemon() as loop:
        trainer = SimpleNamespace(
            accelerator=SimpleNamespace(device="cpu"),
            reward_funcs=reward_funcs,
            reward_processing_classes=[None] * len(reward_funcs),
            reward_func_names=[getattr(f, "__name__", type(f).__name__) for f in reward_funcs],
            state=SimpleNamespace(global_step=step),
            _log_completion_extra=lambda *a, **k: None,
            _log_metric=lambda *a, **k: None,
            environments=None,
            async_loop=loop,
        )
        out = calc(trainer, rows, prompts, completions, [[1]] * len(rows))
    return np.asarray(out.a, dtype=np.float64)


def weighted_rewards(rewards_per_func: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """TRL's reward per row: ``(rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)``."""
    w = np.ones(rewards_per_func.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    result: np.ndarray = np.nansum(rewards_per_func * w[None, :], axis=1)
    return result
