"""Imports every built-in reward module so their handlers register themselves."""

from distrs.rewards import cpp, cuda, math_reward, python_reward, synthetic  # noqa: F401
