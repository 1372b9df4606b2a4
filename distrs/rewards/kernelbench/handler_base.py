"""What the ``kernelbench`` compile and execute handlers share: settings, sandbox, readiness."""

from __future__ import annotations

from distrs.rewards.judge import shared_sandbox
from distrs.rewards.kernelbench.settings import KernelSettings, kernel_settings
from distrs.rewards.kernelbench.toolchain import readiness
from distrs.sandbox import Sandbox
from distrs.sandbox import readiness as sandbox_readiness


class KernelHandler:
    def __init__(self, sandbox: Sandbox | None = None, settings: KernelSettings | None = None) -> None:
        self._sandbox = sandbox
        self._settings = settings or kernel_settings()

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox given at construction, else the worker's shared one."""
        return self._sandbox or shared_sandbox()

    def toolchain_ready(self, *, nvcc: bool = False) -> tuple[bool, str]:
        """torch and ninja import in the configured interpreter (the ``kernels`` extra); with
        ``nvcc`` (the compile stage of a GPU pool) the CUDA compiler is found too."""
        return readiness(self._settings, nvcc=nvcc)

    def sandbox_ready(self) -> tuple[bool, str]:
        return (True, "") if self._sandbox is not None else sandbox_readiness()
