"""The ``kernelbench`` reward type: CUDA kernels in KernelBench's format, built on CPU workers and
judged on an owned GPU (docs/kernels.md).

``compile`` (``compile.py``): static checks, then the candidate's ``load_inline`` calls built in
clean jails and shipped as an artifact. ``execute`` (``execute.py``): the reference and the
candidate each in their own jailed process, compared and timed by the host.
"""

from distrs.rewards.kernelbench.compile import CompileHandler
from distrs.rewards.kernelbench.execute import ExecuteHandler

# Entry point ``kernelbench`` of group ``distrs.rewards`` (pyproject.toml): stage -> handler factory.
HANDLERS = {"compile": CompileHandler, "execute": ExecuteHandler}

__all__ = ["HANDLERS", "CompileHandler", "ExecuteHandler"]
