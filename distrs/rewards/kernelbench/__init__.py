"""The ``kernelbench`` reward type: CUDA kernels in KernelBench's format, built on CPU workers and
judged on an owned GPU (docs/kernels.md).

``compile`` (``compile.py``): static checks, then the candidate's ``load_inline`` calls built in
clean jails and shipped as an artifact. ``execute`` (``execute.py``): the reference and the
candidate each in their own jailed process, compared and timed by the host.

Its descriptor gives the compile stage a timeout of its own, 600 s: an honest build (a torch CUDA
extension, 2-4 min of compiler CPU cold) needs that on a small pool, its wait for the build's CPUs
included (docs/kernels.md); the other types keep the shared stage's.
"""

from distrs.core.reward_type import Extra, RewardType
from distrs.rewards.kernelbench.compile import CompileHandler
from distrs.rewards.kernelbench.execute import ExecuteHandler
from distrs.rewards.kernelbench.settings import KernelSettings

# Entry point ``kernelbench`` of group ``distrs.rewards`` (pyproject.toml).
REWARD_TYPE = RewardType(
    name="kernelbench",
    stages=("compile", "execute"),
    handlers={"compile": CompileHandler, "execute": ExecuteHandler},
    timeouts={"compile": 600.0},
    extra=Extra("kernels", ("torch", "ninja")),
    settings=KernelSettings,
)

__all__ = ["REWARD_TYPE", "CompileHandler", "ExecuteHandler"]
